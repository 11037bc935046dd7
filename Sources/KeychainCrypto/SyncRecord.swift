import KeychainModel

/// The clear columns of a record row (docs/sync.md, section 4). All of them are in the
/// AEAD's associated data, so none can be edited, and no body moved to another row, unseen.
public struct SyncRecordHeader: Sendable, Hashable {
    public static let recordIDBytes = 32

    public var circleID: SyncCircleID
    public var recordID: [UInt8]
    public var epoch: UInt32
    public var version: SyncVersion
    public var tombstone: Bool

    public init(circleID: SyncCircleID, recordID: [UInt8], epoch: UInt32, version: SyncVersion, tombstone: Bool) {
        self.circleID = circleID
        self.recordID = recordID
        self.epoch = epoch
        self.version = version
        self.tombstone = tombstone
    }

    /// "keychaind/v1/sync-record" ‖ circle id ‖ record id ‖ u32 epoch ‖ i64 mdat ‖ writer id
    /// ‖ i64 counter ‖ u8 tombstone, integers little-endian.
    var associatedData: [UInt8] {
        var w = ByteWriter()
        w.raw("keychaind/v1/sync-record".utf8)
        w.raw(circleID.bytes)
        w.raw(recordID)
        w.u32(epoch)
        w.u64(UInt64(bitPattern: version.mdat))
        w.raw(version.writer.bytes)
        w.u64(UInt64(bitPattern: version.counter))
        w.u8(tombstone ? 1 : 0)
        return w.bytes
    }
}

/// What a record holds once opened.
public enum SyncRecordContents: Sendable, Equatable {
    /// Every attribute of the item, its secret as v_Data among them.
    case item(ItemClass, Protection, AttributeDictionary)
    /// A delete: the record id names the item, the class says which table it left.
    case tombstone(ItemClass)
}

/// Seals and opens record bodies under RSK(e): nonce (24) ‖ XChaCha20-Poly1305 ciphertext of
///
///     item:      u8 format (1) ‖ u8 class ‖ u8 pdmn key class ‖ attribute dictionary ‖ 0x80 ‖ zeros
///     tombstone: u8 format (1) ‖ u8 class ‖ 0x80 ‖ zeros
///
/// padded to a multiple of 256 bytes, so the store sees a size bucket, not a length.
public enum SyncRecordSealer {
    static let formatVersion: UInt8 = 1
    static let paddingBlock = 256

    /// Seals a synchronizable item as a record of `version`, with its record id computed here.
    public static func seal(_ itemClass: ItemClass, _ protection: Protection, _ attributes: AttributeDictionary,
                            version: SyncVersion, circleKey: SyncCircleKey) throws(KeychainError) -> (SyncRecordHeader, [UInt8]) {
        try seal(itemClass, protection, attributes, version: version, circleKey: circleKey,
                 nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    static func seal(_ itemClass: ItemClass, _ protection: Protection, _ attributes: AttributeDictionary,
                     version: SyncVersion, circleKey: SyncCircleKey, nonce: [UInt8]) throws(KeychainError) -> (SyncRecordHeader, [UInt8]) {
        // Defence in depth: the store refuses sync = 1 on these classes, and nothing else may
        // ever put a ThisDeviceOnly item or a sync = 0 one where other machines can read it.
        guard !protection.isThisDeviceOnly else {
            throw KeychainError.param("a \(protection.rawValue) item never leaves this device")
        }
        guard case .int(1)? = attributes["sync"] else {
            throw KeychainError.param("only an item with sync = 1 is synced")
        }
        let header = SyncRecordHeader(circleID: circleKey.circleID,
                                      recordID: try circleKey.recordID(of: itemClass, attributes: attributes),
                                      epoch: circleKey.epoch, version: version, tombstone: false)
        var w = ByteWriter()
        w.u8(formatVersion)
        w.u8(itemClass.syncNumber)
        w.u8(protection.keyClassNumber)
        AttributeCodec.encode(attributes, into: &w)
        pad(&w)
        return (header, AEAD.seal(w.finish(), associatedData: header.associatedData, key: circleKey.recordSealKey, nonce: nonce))
    }

    /// Seals a delete of the item whose record id is `recordID`.
    public static func sealTombstone(_ itemClass: ItemClass, recordID: [UInt8], version: SyncVersion,
                                     circleKey: SyncCircleKey) -> (SyncRecordHeader, [UInt8]) {
        sealTombstone(itemClass, recordID: recordID, version: version, circleKey: circleKey,
                      nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    static func sealTombstone(_ itemClass: ItemClass, recordID: [UInt8], version: SyncVersion,
                              circleKey: SyncCircleKey, nonce: [UInt8]) -> (SyncRecordHeader, [UInt8]) {
        precondition(recordID.count == SyncRecordHeader.recordIDBytes)
        let header = SyncRecordHeader(circleID: circleKey.circleID, recordID: recordID, epoch: circleKey.epoch,
                                      version: version, tombstone: true)
        var w = ByteWriter()
        w.u8(formatVersion)
        w.u8(itemClass.syncNumber)
        pad(&w)
        return (header, AEAD.seal(w.finish(), associatedData: header.associatedData, key: circleKey.recordSealKey, nonce: nonce))
    }

    /// Opens a pulled row. errSecDecode for anything but a record sealed by a member of this
    /// epoch for exactly this header: another circle or epoch, an edited column, a moved or
    /// altered body, an item whose attributes do not give the row's record id.
    public static func open(_ header: SyncRecordHeader, body: [UInt8], circleKey: SyncCircleKey) throws(KeychainError) -> SyncRecordContents {
        guard header.circleID == circleKey.circleID else {
            throw KeychainError(.decode, "the record belongs to another circle")
        }
        guard header.epoch == circleKey.epoch else {
            throw KeychainError(.decode, "the record is of epoch \(header.epoch); only epoch \(circleKey.epoch) is accepted")
        }
        guard header.recordID.count == SyncRecordHeader.recordIDBytes else {
            throw KeychainError(.decode, "a record id is \(SyncRecordHeader.recordIDBytes) bytes")
        }
        guard let padded = AEAD.open(body, associatedData: header.associatedData, key: circleKey.recordSealKey) else {
            throw KeychainError(.decode, "the record does not verify: altered, moved, or not sealed by a member of this epoch")
        }
        // From here the bytes are a member's: a malformed plaintext is a bug or a rogue member,
        // still refused with a status, never a crash.
        let plaintext = try unpad(padded)
        var r = ByteReader(plaintext, failure: .decode)
        guard try r.u8() == formatVersion else { throw r.fail("record format is unknown") }
        guard let itemClass = ItemClass(syncNumber: try r.u8()) else { throw r.fail("record names an unknown class") }
        if header.tombstone {
            guard r.isAtEnd else { throw r.fail("a tombstone carries bytes after its class") }
            return .tombstone(itemClass)
        }
        let number = try r.u8()
        guard let protection = Protection.allCases.first(where: { $0.keyClassNumber == number }),
              !protection.isThisDeviceOnly else {
            throw r.fail("record names a protection class that is never synced")
        }
        let attributes = try AttributeCodec.decode(from: &r)
        guard r.isAtEnd else { throw r.fail("\(r.remaining) unexpected bytes after the record's attributes") }
        guard case .int(1)? = attributes["sync"] else { throw r.fail("the record's item does not have sync = 1") }
        let expected = try circleKey.recordID(of: itemClass, attributes: attributes)
        guard Sodium.constantTimeEqual(expected, header.recordID) else {
            throw KeychainError(.decode, "the record's item does not have the row's record id")
        }
        return .item(itemClass, protection, attributes)
    }

    private static func pad(_ w: inout ByteWriter) {
        w.u8(0x80)
        while w.count % paddingBlock != 0 { w.u8(0) }
    }

    /// The plaintext before its 0x80 ‖ zeros, in wiped memory.
    private static func unpad(_ padded: SecretBytes) throws(KeychainError) -> SecretBytes {
        guard padded.count % paddingBlock == 0, let end = padded.lastIndex(where: { $0 != 0 }), padded[end] == 0x80 else {
            throw KeychainError(.decode, "the record's padding is malformed")
        }
        return SecretBytes(count: end) { dst in
            padded.withUnsafeBytes { dst.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[0..<end])) }
        }
    }
}
