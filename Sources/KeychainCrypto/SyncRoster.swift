import KeychainModel

/// One entry of a circle's roster (docs/sync.md, section 3), 161 bytes:
///
///     u32 n ‖ prev (32) ‖ u8 kind ‖ circle id (16) ‖ u32 epoch ‖ subject id (16)
///     ‖ subject sign_pk (32) ‖ subject kx_pk (32) ‖ i64 time (ms since 2001) ‖ signer id (16)
///
/// little-endian; prev is BLAKE2b-256 of entry n-1 (zeros for entry 0); epoch is the epoch in
/// force after the entry.
public struct SyncRosterEntry: Sendable, Hashable {
    public enum Kind: UInt8, Sendable {
        case found = 0, add = 1, remove = 2, leave = 3
    }

    static let encodedBytes = 161

    public var number: UInt32
    public var previous: [UInt8]
    public var kind: Kind
    public var circleID: SyncCircleID
    public var epoch: UInt32
    public var subject: SyncDeviceKeys
    public var time: Int64
    public var signer: SyncDeviceID

    public var encoded: [UInt8] {
        var w = ByteWriter(capacity: Self.encodedBytes)
        w.u32(number)
        w.raw(previous)
        w.u8(kind.rawValue)
        w.raw(circleID.bytes)
        w.u32(epoch)
        w.raw(subject.id.bytes)
        w.raw(subject.signPublicKey)
        w.raw(subject.agreementPublicKey)
        w.u64(UInt64(bitPattern: time))
        w.raw(signer.bytes)
        return w.bytes
    }

    public init(number: UInt32, previous: [UInt8], kind: Kind, circleID: SyncCircleID, epoch: UInt32,
                subject: SyncDeviceKeys, time: Int64, signer: SyncDeviceID) {
        self.number = number
        self.previous = previous
        self.kind = kind
        self.circleID = circleID
        self.epoch = epoch
        self.subject = subject
        self.time = time
        self.signer = signer
    }

    public init(decoding bytes: [UInt8]) throws(KeychainError) {
        guard bytes.count == Self.encodedBytes else {
            throw KeychainError(.decode, "a roster entry is \(Self.encodedBytes) bytes, not \(bytes.count)")
        }
        var r = ByteReader(bytes, failure: .decode)
        number = try r.u32()
        previous = try r.take(32)
        guard let kind = Kind(rawValue: try r.u8()) else { throw r.fail("roster entry kind is unknown") }
        self.kind = kind
        circleID = try SyncCircleID(r.take(16))
        epoch = try r.u32()
        let subjectID = try r.take(16)
        subject = try SyncDeviceKeys(signPublicKey: r.take(32), agreementPublicKey: r.take(32))
        guard subject.id.bytes == subjectID else { throw r.fail("roster entry's subject id is not its keys' id") }
        time = Int64(bitPattern: try r.u64())
        signer = try SyncDeviceID(r.take(16))
    }

    /// What entry n+1 names as its prev; for the last entry, the roster hash heads carry.
    public var hash: [UInt8] { PublicHash.blake2b256(encoded) }

    var signedMessage: [UInt8] { Array("keychaind/v1/roster".utf8) + encoded }
}

/// An entry with its signer's Ed25519 signature over "keychaind/v1/roster" ‖ entry.
public struct SignedRosterEntry: Sendable, Hashable {
    public var entry: SyncRosterEntry
    public var signature: [UInt8]

    public init(entry: SyncRosterEntry, signature: [UInt8]) {
        self.entry = entry
        self.signature = signature
    }
}

/// A circle's membership as this device verified it: an append-only, hash-chained list of
/// signed entries. The store can withhold entries but not add a member, drop one it has shown
/// this device (a fork), or sign in a member's name.
public struct SyncRoster: Sendable {
    public private(set) var entries: [SignedRosterEntry] = []
    /// Members after the last entry, by id.
    public private(set) var members: [SyncDeviceID: SyncDeviceKeys] = [:]
    /// Devices that left since the last rotation: a member must now rotate (a remove entry
    /// naming one of them).
    public private(set) var awaitingRotation: Set<SyncDeviceID> = []
    /// Every device that ever left or was removed. None of them is added again: a removed
    /// device still holds its identity's secrets, and a member who typed its old digits by
    /// mistake would hand it the next circle key. It comes back only as a new device, with a
    /// new identity and new digits (docs/sync.md, section 3).
    public private(set) var departed: Set<SyncDeviceID> = []
    public private(set) var epoch: UInt32 = 0

    /// Verifies `entries` from entry 0; errSecDecode at the first that breaks a rule.
    public init(verifying entries: [SignedRosterEntry]) throws(KeychainError) {
        guard !entries.isEmpty else { throw KeychainError(.decode, "a roster starts with its founding entry") }
        for signed in entries { try append(signed) }
    }

    /// A new circle's roster: entry 0, signed by the founder for itself.
    public static func found(circleID: SyncCircleID, by founder: SyncDeviceIdentity, time: Int64) -> SyncRoster {
        let entry = SyncRosterEntry(number: 0, previous: [UInt8](repeating: 0, count: 32), kind: .found,
                                    circleID: circleID, epoch: 1, subject: founder.keys, time: time, signer: founder.id)
        return try! SyncRoster(verifying: [SignedRosterEntry(entry: entry, signature: founder.sign(entry.signedMessage))])
    }

    public var circleID: SyncCircleID { entries[0].entry.circleID }
    public var length: Int { entries.count }
    /// The hash of the last entry: with the length, what a head commits to.
    public var hash: [UInt8] { entries[entries.count - 1].entry.hash }

    /// The hash of the roster as it stood with `length` entries, if this device has that many.
    public func hash(atLength length: Int) -> [UInt8]? {
        guard length >= 1, length <= entries.count else { return nil }
        return entries[length - 1].entry.hash
    }

    /// The digits people compare to be sure they join this circle and not a look-alike:
    /// from BLAKE2b-256("keychaind/v1/circle" ‖ entry 0), bytes 16..<32.
    public var circleFingerprint: SyncFingerprint {
        let h = PublicHash.blake2b256(Array("keychaind/v1/circle".utf8), entries[0].entry.encoded)
        return SyncFingerprint(hashBytes: Array(h[16..<32]))
    }

    /// The next entry of `kind` about `subject`, signed by `signer`; errSecParam where the
    /// rules would refuse it (the roster is left unchanged then).
    public func signing(_ kind: SyncRosterEntry.Kind, subject: SyncDeviceKeys, by signer: SyncDeviceIdentity,
                        time: Int64) throws(KeychainError) -> SignedRosterEntry {
        let entry = SyncRosterEntry(number: UInt32(entries.count), previous: hash, kind: kind, circleID: circleID,
                                    epoch: kind == .remove ? epoch &+ 1 : epoch, subject: subject, time: time,
                                    signer: signer.id)
        let signed = SignedRosterEntry(entry: entry, signature: signer.sign(entry.signedMessage))
        var check = self
        do { try check.append(signed) } catch { throw KeychainError.param(error.message) }
        return signed
    }

    /// Verifies one more entry against the roster so far and applies it.
    public mutating func append(_ signed: SignedRosterEntry) throws(KeychainError) {
        let e = signed.entry
        func refuse(_ why: String) -> KeychainError { KeychainError(.decode, "roster entry \(e.number): \(why)") }
        guard e.number == UInt32(entries.count) else { throw refuse("expected entry \(entries.count)") }
        let expectedPrevious = entries.last?.entry.hash ?? [UInt8](repeating: 0, count: 32)
        guard e.previous == expectedPrevious else { throw refuse("does not chain to the entry before it") }

        let signerKeys: SyncDeviceKeys
        var next = (members: members, awaiting: awaitingRotation, departed: departed, epoch: epoch)
        switch e.kind {
        case .found:
            guard entries.isEmpty else { throw refuse("only entry 0 founds a circle") }
            guard e.signer == e.subject.id, e.epoch == 1 else { throw refuse("the founder signs entry 0 for itself, in epoch 1") }
            signerKeys = e.subject
            next.members[e.subject.id] = e.subject
            next.epoch = 1
        case .add, .remove, .leave:
            guard !entries.isEmpty, e.circleID == circleID else { throw refuse("is not of this circle") }
            guard let keys = members[e.signer] else { throw refuse("its signer is not a member") }
            signerKeys = keys
            switch e.kind {
            case .add:
                guard members[e.subject.id] == nil, e.epoch == epoch else { throw refuse("adds a member, or keeps the epoch, wrongly") }
                guard !departed.contains(e.subject.id) else {
                    throw refuse("adds a device that left or was removed; it may come back only as a new device")
                }
                next.members[e.subject.id] = e.subject
            case .leave:
                guard e.signer == e.subject.id, e.epoch == epoch else { throw refuse("only a member leaves, itself, in its epoch") }
                next.members[e.subject.id] = nil
                next.awaiting.insert(e.subject.id)
                next.departed.insert(e.subject.id)
            case .remove:
                // A member removes another, or rotates after one left: either way a new epoch
                // whose key no departed device receives.
                let isMember = members[e.subject.id] == e.subject && e.subject.id != e.signer
                guard isMember || awaitingRotation.contains(e.subject.id) else {
                    throw refuse("removes a device that is neither another member nor one that left")
                }
                guard epoch < UInt32.max, e.epoch == epoch + 1 else { throw refuse("a removal starts the epoch after \(epoch)") }
                next.members[e.subject.id] = nil
                next.departed.insert(e.subject.id)
                next.awaiting = []
                next.epoch = e.epoch
            case .found: fatalError("handled above")
            }
        }
        guard signerKeys.verify(signed.signature, of: e.signedMessage) else { throw refuse("its signature does not verify") }
        entries.append(signed)
        (members, awaitingRotation, departed, epoch) = next
    }

    /// Takes the store's copy: every entry this device holds must be there unchanged (else a
    /// fork: errSecDecode, and nothing is taken), and the rest are verified and appended. A
    /// shorter copy is the rollback check's business (SyncStoreState), not a fork.
    public mutating func extend(with stored: [SignedRosterEntry]) throws(KeychainError) {
        for (mine, theirs) in zip(entries, stored) where mine != theirs {
            throw KeychainError(.decode, "roster fork at entry \(mine.entry.number): the store disagrees with what this device verified")
        }
        var next = self
        for signed in stored.dropFirst(entries.count) { try next.append(signed) }
        self = next
    }
}
