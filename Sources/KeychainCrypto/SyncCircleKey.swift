import KeychainModel

/// A circle's 16-byte random id.
public struct SyncCircleID: Sendable, Hashable {
    public static let byteCount = 16
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) throws(KeychainError) {
        guard bytes.count == Self.byteCount else {
            throw KeychainError(.decode, "a circle id is \(Self.byteCount) bytes, not \(bytes.count)")
        }
        self.bytes = bytes
    }

    public static func random() -> SyncCircleID { try! SyncCircleID(Sodium.randomBytes(byteCount)) }
}

/// The circle key CCK(e) of one epoch and the two keys derived from it (docs/sync.md, 2.2):
/// RSK(e) seals records, RIK(e) names them. Every member holds the same three.
public struct SyncCircleKey: Sendable {
    public let circleID: SyncCircleID
    public let epoch: UInt32
    let key: SecureKey
    let recordSealKey: SecureKey
    let recordIDKey: SecureKey
    let localTombstoneKey: SecureKey

    /// A fresh key for a new circle (epoch 1) or for the epoch a removal starts.
    public static func random(circleID: SyncCircleID, epoch: UInt32) -> SyncCircleKey {
        SyncCircleKey(circleID: circleID, epoch: epoch, key: .random())
    }

    init(circleID: SyncCircleID, epoch: UInt32, key: SecureKey) {
        self.circleID = circleID
        self.epoch = epoch
        self.key = key
        recordSealKey = key.derive(id: 1, context: "syncseal")
        recordIDKey = key.derive(id: 2, context: "syncid__")
        localTombstoneKey = key.derive(id: 3, context: "synctomb")
    }

    /// The record id of an item: keyed BLAKE2b-256 under RIK(e) of its class and primary key,
    /// so the same item meets itself in one row whichever device pushes it. `attributes` are
    /// the item's stored (coerced) attributes; missing primary-key ones take their defaults,
    /// as the uniqueness check does.
    public func recordID(of itemClass: ItemClass, attributes: AttributeDictionary) throws(KeychainError) -> [UInt8] {
        KeyedHash.hash(try Self.recordIDMessage(itemClass, attributes), key: recordIDKey, outputBytes: 32)
    }

    /// "keychaind/v1/record-id" ‖ u8 class ‖ per attribute of (agrp, sync, the class's primary
    /// key in schema order): 00 ‖ u32 length ‖ bytes, or 01 ‖ i64 for a number in a blob
    /// attribute (a blob 42 and "42" are different items, as in the lookup columns).
    static func recordIDMessage(_ itemClass: ItemClass, _ attributes: AttributeDictionary) throws(KeychainError) -> [UInt8] {
        guard let schema = ClassSchema.of(itemClass) else {
            throw KeychainError.param("class \(itemClass.rawValue) has no records of its own to sync")
        }
        var w = ByteWriter()
        w.raw("keychaind/v1/record-id".utf8)
        w.u8(itemClass.syncNumber)
        for spec in [schema.spec("agrp")!, schema.spec("sync")!] + schema.primaryKey {
            switch spec.matchKey(attributes[spec.code] ?? spec.defaultValue) {
            case .bytes(let b): w.u8(0); w.lengthPrefixed(b)
            case .blobNumber(let n): w.u8(1); w.u64(UInt64(bitPattern: n))
            }
        }
        return w.bytes
    }

    /// The name a device's local tombstone of a record goes by (docs/sync.md, 5): keyed
    /// again under a key of this epoch that the store never sees, so that this device's file
    /// and a copy of the store's tables cannot be joined on it.
    public func tombstoneTag(recordID: [UInt8]) -> [UInt8] {
        KeyedHash.hash(domain: "keychaind/v1/sync-local-tombstone", recordID, key: localTombstoneKey, outputBytes: 32)
    }

    // MARK: kept locally under CK[ck]

    public func sealed(under classKey: SecureKey) -> [UInt8] {
        sealed(under: classKey, nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    func sealed(under classKey: SecureKey, nonce: [UInt8]) -> [UInt8] {
        AEAD.seal(key, associatedData: Self.localAssociatedData(circleID, epoch), key: classKey, nonce: nonce)
    }

    /// Opens what `sealed` wrote for this circle and epoch; errSecDecode otherwise.
    public init(opening sealed: [UInt8], circleID: SyncCircleID, epoch: UInt32, classKey: SecureKey) throws(KeychainError) {
        guard let raw = AEAD.open(sealed, associatedData: Self.localAssociatedData(circleID, epoch), key: classKey),
              raw.count == SecureKey.byteCount else {
            throw KeychainError(.decode, "the circle key of epoch \(epoch) does not open")
        }
        self.init(circleID: circleID, epoch: epoch, key: SecureKey(copying: raw))
    }

    static func localAssociatedData(_ circleID: SyncCircleID, _ epoch: UInt32) -> [UInt8] {
        var w = ByteWriter()
        w.raw("keychaind/v1/sync-circle-key".utf8)
        w.raw(circleID.bytes)
        w.u32(epoch)
        return w.bytes
    }
}

extension ItemClass {
    /// The class's number in sync record ids and plaintexts.
    var syncNumber: UInt8 {
        switch self {
        case .genericPassword: 1
        case .internetPassword: 2
        case .certificate: 3
        case .key: 4
        case .identity: 0
        }
    }

    init?(syncNumber: UInt8) {
        guard let found = ItemClass.stored.first(where: { $0.syncNumber == syncNumber }) else { return nil }
        self = found
    }
}
