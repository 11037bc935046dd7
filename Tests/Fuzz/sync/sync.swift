// libFuzzer target: what a malicious sync database sends (docs/sync.md 3-6): roster rows, taken
// whole (SyncRoster(verifying:)) and onto a verified roster (extend(with:)); record rows opened
// under the circle key, and record plaintexts sealed here under that key so that the decoder
// behind the AEAD is reached (what a member gone bad could send); heads; wrapped circle keys;
// join requests. None may crash or hang, and nothing that does not verify may be accepted: each
// answer is checked again here, from the formats as docs/sync.md describes them.
//
// Input: one byte choosing what the rest is, then fields of u16 length (little-endian) and
// bytes; a field past the end of the input is empty. The circle, its members a and b, the
// circle key and the roster are those of Tests/Vectors/sync-roster-v1.hex.
import KeychainCrypto
import KeychainModel

let circleID = try! SyncCircleID(Array(0x80...0x8f))
let classKey = key(Array(0xc0...0xdf))

/// A device from its secrets, through public calls only: its secrets are sealed here as the
/// store keeps them and opened again.
func device(seed: [UInt8], agreement: [UInt8]) -> SyncDeviceIdentity {
    let keys = try! SyncDeviceKeys(signPublicKey: Ed25519.publicKey(seed: key(seed)),
                                   agreementPublicKey: X25519.publicKey(secret: key(agreement)))
    let sealed = AEAD.seal(seed + agreement, associatedData: Array("keychaind/v1/sync-identity".utf8) + keys.id.bytes,
                           key: classKey)
    return try! SyncDeviceIdentity(opening: sealed, id: keys.id, classKey: classKey)
}

let a = device(seed: Array(0x00...0x1f), agreement: Array(0x20...0x3f))
let b = device(seed: Array(0x40...0x5f), agreement: Array(0x60...0x7f))
let cckBytes: [UInt8] = Array(0xa0...0xbf)
let circleKey: SyncCircleKey = {
    let sealed = AEAD.seal(cckBytes, associatedData: Array("keychaind/v1/sync-circle-key".utf8) + circleID.bytes + le(UInt32(1)),
                           key: classKey)
    return try! SyncCircleKey(opening: sealed, circleID: circleID, epoch: 1, classKey: classKey)
}()
let recordSealKey = key(cckBytes).derive(id: 1, context: "syncseal")
let roster: SyncRoster = {
    var roster = SyncRoster.found(circleID: circleID, by: a, time: 800_000_000_000)
    try! roster.append(roster.signing(.add, subject: b.keys, by: a, time: 800_000_002_000))
    return roster
}()

enum Mode: UInt8, CaseIterable {
    case rosterWhole, rosterExtend, recordRow, recordPlaintext, head, wrap, join
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var input = Fields(Array(UnsafeBufferPointer(start: data, count: size)))
    guard let first = input.byte() else { return 0 }
    switch Mode(rawValue: first % UInt8(Mode.allCases.count))! {
    case .rosterWhole:
        guard let entries = input.rosterEntries() else { return 0 }
        if let verified = try? SyncRoster(verifying: entries) {
            requireVerifies(verified.entries)
        }
    case .rosterExtend:
        guard let entries = input.rosterEntries() else { return 0 }
        var mine = roster
        if (try? mine.extend(with: entries)) != nil {
            require(Array(mine.entries.prefix(roster.length)) == roster.entries, "extend dropped or changed a verified entry")
            requireVerifies(mine.entries)
        }
    case .recordRow:
        guard let header = input.recordHeader() else { return 0 }
        checkOpened(header, body: input.field())
    case .recordPlaintext:
        guard let header = input.recordHeader() else { return 0 }
        let body = AEAD.seal(input.rest(), associatedData: recordAAD(header), key: recordSealKey)
        checkOpened(header, body: body)
    case .head:
        guard let device = try? SyncDeviceID(input.field()) else { return 0 }
        let head = SyncHead(circleID: circleID, epoch: input.u32(), device: device, counter: input.i64(),
                            rosterLength: input.u32(), rosterHash: input.field(), signature: input.field())
        if (try? head.verify(roster: roster)) != nil {
            let keys = roster.members[device]
            require(keys != nil, "a head of a non-member verified")
            let message = Array("keychaind/v1/head".utf8) + circleID.bytes + le(head.epoch) + device.bytes + le(head.counter)
                + le(head.rosterLength) + head.rosterHash
            require(keys!.verify(head.signature, of: message), "a head verified whose signature does not")
            require(head.epoch <= roster.epoch, "a head of an epoch the roster has not reached verified")
        }
    case .wrap:
        guard let wrapper = try? SyncDeviceID(input.field()) else { return 0 }
        let wrapped = SyncWrappedKey(circleID: circleID, epoch: input.u32(), recipient: b.id, wrapper: wrapper,
                                     wrapped: input.field(), signature: input.field())
        if let opened = try? wrapped.unwrap(as: b, roster: roster) {
            let keys = roster.members[wrapper]
            require(keys != nil && wrapped.epoch == roster.epoch && opened.epoch == roster.epoch,
                    "a wrap of another epoch or by a non-member opened")
            let message = Array("keychaind/v1/sync-wrapped-key".utf8) + circleID.bytes + le(wrapped.epoch) + b.id.bytes
                + wrapper.bytes + wrapped.wrapped
            require(keys!.verify(wrapped.signature, of: message), "a wrap opened whose signature does not verify")
        }
    case .join:
        guard let keys = try? SyncDeviceKeys(signPublicKey: input.field(), agreementPublicKey: input.field()),
              let name = String(validating: input.field(), as: UTF8.self) else { return 0 }
        let request = SyncJoinRequest(circleID: circleID, device: keys, name: name, signature: input.field())
        if request.isSigned(by: keys.fingerprint, for: circleID) {
            let nameBytes = Array(name.utf8)
            let message = Array("keychaind/v1/sync-join".utf8) + circleID.bytes + keys.id.bytes + keys.signPublicKey
                + keys.agreementPublicKey + le(UInt32(nameBytes.count)) + nameBytes
            require(nameBytes.count <= SyncJoinRequest.maxNameBytes, "a join request with a name over 64 bytes verified")
            require(keys.verify(request.signature, of: message), "a join request verified whose signature does not")
        }
    }
    return 0
}

/// Every entry of a roster that was accepted must chain and carry the signature of a device
/// that an earlier entry made a member (or of its subject, for entry 0 and a leave).
func requireVerifies(_ entries: [SignedRosterEntry]) {
    var previous = [UInt8](repeating: 0, count: 32)
    var members: [SyncDeviceID: SyncDeviceKeys] = [:]
    var departed: Set<SyncDeviceID> = []
    for (n, signed) in entries.enumerated() {
        let e = signed.entry
        require(e.number == UInt32(n) && e.previous == previous, "an accepted roster entry does not chain")
        let selfSigned = n == 0 || e.kind == .leave
        let signer = selfSigned ? e.subject : members[e.signer]
        require(signer != nil && signer!.id == e.signer, "an accepted roster entry's signer was not a member")
        let message = Array("keychaind/v1/roster".utf8) + e.encoded
        require(signer!.verify(signed.signature, of: message), "an accepted roster entry's signature does not verify")
        switch e.kind {
        case .found, .add:
            require(!departed.contains(e.subject.id), "a departed device was added again")
            members[e.subject.id] = e.subject
        case .remove, .leave:
            members[e.subject.id] = nil
            departed.insert(e.subject.id)
        }
        previous = PublicHash.blake2b256(e.encoded)
    }
}

/// A record that opens must be of this circle and epoch, a shareable class with sync = 1, and
/// give the row's record id.
func checkOpened(_ header: SyncRecordHeader, body: [UInt8]) {
    guard let contents = try? SyncRecordSealer.open(header, body: body, circleKey: circleKey) else { return }
    require(header.circleID == circleID && header.epoch == circleKey.epoch, "a record of another circle or epoch opened")
    switch contents {
    case .item(let itemClass, let protection, let attributes):
        require(!header.tombstone, "a tombstone row opened as an item")
        require(!protection.isThisDeviceOnly, "a ThisDeviceOnly record opened")
        require(attributes["sync"] == .int(1), "a record without sync = 1 opened")
        require((try? circleKey.recordID(of: itemClass, attributes: attributes)) == header.recordID,
                "a record opened whose attributes give another record id")
    case .tombstone:
        require(header.tombstone, "an item row opened as a tombstone")
    }
}

/// The record's associated data as docs/sync.md 4 gives it.
func recordAAD(_ h: SyncRecordHeader) -> [UInt8] {
    Array("keychaind/v1/sync-record".utf8) + h.circleID.bytes + h.recordID + le(h.epoch) + le(h.version.mdat)
        + h.version.writer.bytes + le(h.version.counter) + [h.tombstone ? 1 : 0]
}

struct Fields {
    private let bytes: [UInt8]
    private var at = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func byte() -> UInt8? {
        guard at < bytes.count else { return nil }
        defer { at += 1 }
        return bytes[at]
    }

    mutating func take(_ n: Int) -> [UInt8] {
        let end = min(bytes.count, at + n)
        defer { at = end }
        return Array(bytes[at..<end])
    }

    mutating func field() -> [UInt8] {
        let length = take(2)
        guard length.count == 2 else { return [] }
        return take(Int(length[0]) | Int(length[1]) << 8)
    }

    mutating func rest() -> [UInt8] { take(bytes.count - at) }

    var isAtEnd: Bool { at >= bytes.count }

    mutating func u32() -> UInt32 { take(4).reversed().reduce(0) { $0 << 8 | UInt32($1) } }

    mutating func i64() -> Int64 { Int64(bitPattern: take(8).reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }) }

    /// Entry and signature fields, pair after pair, as the roster table's rows give them; nil
    /// when an entry does not decode (the daemon refuses such a roster before verifying it).
    mutating func rosterEntries() -> [SignedRosterEntry]? {
        var entries: [SignedRosterEntry] = []
        while !isAtEnd {
            guard let entry = try? SyncRosterEntry(decoding: field()) else { return nil }
            entries.append(SignedRosterEntry(entry: entry, signature: field()))
        }
        return entries
    }

    mutating func recordHeader() -> SyncRecordHeader? {
        guard let circle = try? SyncCircleID(field()) else { return nil }
        let recordID = field(), epoch = u32(), mdat = i64()
        guard let writer = try? SyncDeviceID(field()) else { return nil }
        let counter = i64()
        return SyncRecordHeader(circleID: circle, recordID: recordID, epoch: epoch,
                                version: SyncVersion(mdat: mdat, writer: writer, counter: counter), tombstone: (byte() ?? 0) & 1 == 1)
    }
}

func key(_ raw: [UInt8]) -> SecureKey {
    var copy = raw
    return SecureKey.taking(&copy)
}

func le<T: FixedWidthInteger>(_ n: T) -> [UInt8] { withUnsafeBytes(of: n.littleEndian) { Array($0) } }

// MARK: seeds: the golden vectors' circle, in this target's input format

struct SeedWriter {
    var bytes: [UInt8]
    init(_ mode: Mode) { bytes = [mode.rawValue] }
    mutating func field(_ f: [UInt8]) { bytes += le(UInt16(f.count)) + f }
    mutating func raw(_ r: [UInt8]) { bytes += r }
}

func rosterSeed(_ mode: Mode, _ entries: [SignedRosterEntry]) -> [UInt8] {
    var w = SeedWriter(mode)
    for e in entries {
        w.field(e.entry.encoded)
        w.field(e.signature)
    }
    return w.bytes
}

func recordSeed(_ mode: Mode, _ header: SyncRecordHeader, _ last: [UInt8]) -> [UInt8] {
    var w = SeedWriter(mode)
    w.field(header.circleID.bytes)
    w.field(header.recordID)
    w.raw(le(header.epoch) + le(header.version.mdat))
    w.field(header.version.writer.bytes)
    w.raw(le(header.version.counter) + [header.tombstone ? 1 : 0])
    if mode == .recordPlaintext { w.raw(last) } else { w.field(last) }
    return w.bytes
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        var departed = roster
        try! departed.append(departed.signing(.leave, subject: b.keys, by: b, time: 800_000_003_000))
        try! departed.append(departed.signing(.remove, subject: b.keys, by: a, time: 800_000_004_000))
        // Near misses: b added again after its removal (by a, validly signed), and entry 1 alone.
        let readd = SyncRosterEntry(number: 4, previous: departed.hash, kind: .add, circleID: circleID, epoch: 2,
                                    subject: b.keys, time: 800_000_005_000, signer: a.id)
        let again = departed.entries + [SignedRosterEntry(entry: readd, signature: a.sign(Array("keychaind/v1/roster".utf8) + readd.encoded))]

        let attributes: AttributeDictionary = [
            "class": .string("genp"), "acct": .string("me"), "svce": .string("api"), "labl": .string("label"),
            "agrp": .string("uid.0"), "pdmn": .string("ck"), "sync": .int(1), "cdat": .date(800_000_000),
            "mdat": .date(800_000_001), "v_Data": .data(Array("tok".utf8)),
        ]
        let version = SyncVersion(mdat: 800_000_001_000, writer: a.id, counter: 7)
        let (header, body) = try! SyncRecordSealer.seal(.genericPassword, .afterFirstUnlock, attributes, version: version,
                                                        circleKey: circleKey)
        let (tombHeader, tombBody) = SyncRecordSealer.sealTombstone(.genericPassword, recordID: header.recordID, version: version,
                                                                    circleKey: circleKey)
        let plaintext = AEAD.open(body, associatedData: recordAAD(header), key: recordSealKey)!.withUnsafeBytes { Array($0) }

        let head = SyncHead.signed(by: a, counter: 7, roster: roster)
        var headSeed = SeedWriter(.head)
        headSeed.field(head.device.bytes)
        headSeed.raw(le(head.epoch) + le(head.counter) + le(head.rosterLength))
        headSeed.field(head.rosterHash)
        headSeed.field(head.signature)

        let wrapped = try! SyncWrappedKey.wrap(circleKey, to: b.keys, by: a)
        var wrapSeed = SeedWriter(.wrap)
        wrapSeed.field(a.id.bytes)
        wrapSeed.raw(le(wrapped.epoch))
        wrapSeed.field(wrapped.wrapped)
        wrapSeed.field(wrapped.signature)

        let join = try! SyncJoinRequest.signed(by: b, circleID: circleID, name: "laptop")
        var joinSeed = SeedWriter(.join)
        joinSeed.field(b.keys.signPublicKey)
        joinSeed.field(b.keys.agreementPublicKey)
        joinSeed.field(Array("laptop".utf8))
        joinSeed.field(join.signature)

        return [
            Seed("roster-whole", rosterSeed(.rosterWhole, roster.entries)),
            Seed("roster-whole-departed", rosterSeed(.rosterWhole, departed.entries)),
            Seed("roster-whole-readded", rosterSeed(.rosterWhole, again)),
            Seed("roster-extend", rosterSeed(.rosterExtend, departed.entries)),
            Seed("roster-extend-fork", rosterSeed(.rosterExtend, [roster.entries[0], departed.entries[2]])),
            Seed("record-row", recordSeed(.recordRow, header, body)),
            Seed("record-tombstone", recordSeed(.recordRow, tombHeader, tombBody)),
            Seed("record-plaintext", recordSeed(.recordPlaintext, header, plaintext)),
            Seed("head", headSeed.bytes),
            Seed("wrap", wrapSeed.bytes),
            Seed("join", joinSeed.bytes),
        ]
    }
    return 0
}
