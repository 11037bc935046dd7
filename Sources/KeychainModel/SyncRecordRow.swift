/// One row of the store's `sync_records` (docs/sync.md, 4 and 7.1) as both sides handle it:
/// the clear columns the store's upsert and the pull cursor need, and the sealed body. What
/// the body holds, and that every clear column is bound into its tag, is SyncRecordSealer's
/// business (KeychainCrypto); here the row is opaque, so the PostgreSQL layer and the local
/// store exchange it without either seeing an attribute.
public struct SyncRecordRow: Sendable, Hashable {
    /// 32 bytes: the keyed hash of the item's class and primary key under RIK(epoch).
    public var recordID: [UInt8]
    /// The store's position of the row: given by the push transaction, 0 before it.
    public var seq: Int64
    public var epoch: UInt32
    public var version: SyncVersion
    public var tombstone: Bool
    /// nonce ‖ XChaCha20-Poly1305 ciphertext under RSK(epoch).
    public var body: [UInt8]

    public init(recordID: [UInt8], seq: Int64 = 0, epoch: UInt32, version: SyncVersion, tombstone: Bool, body: [UInt8]) {
        self.recordID = recordID
        self.seq = seq
        self.epoch = epoch
        self.version = version
        self.tombstone = tombstone
        self.body = body
    }
}
