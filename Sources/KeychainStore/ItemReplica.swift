import KeychainCrypto
import KeychainModel
import KeychainStorage

/// The replica port: all that a replicator of this keychain's items to other devices
/// (KeychainSync, docs/sync.md "Where the code lives") reads and writes of the store. The
/// store fills the outbox itself, in the transaction of each local write; the replicator
/// reads it, seals what it holds, and writes the versions other devices made.
///
/// It lends the store's database, so that the replicator's own tables commit in the same
/// transactions as the items they describe, and the loaded class keys, so that its state is
/// sealed as the items are (and locks with them). Writes made through it queue nothing:
/// a version another device made is not a local change to send back.
///
/// Valid while its store lives, for the store's one owner, like the store itself.
public struct ItemReplica {
    let store: ItemStore

    /// The store's database, for the replicator's tables and transactions.
    public var database: SQLiteDatabase { store.database }

    /// The changes to send, in the order of the local writes.
    public var outbox: OutboxTable { store.outbox.table }

    /// The class key of `pdmn` while it is loaded; nil while its class is locked.
    public func classKey(_ pdmn: Protection) -> SecureKey? { store.keybag.key(for: pdmn) }

    /// The store's clock (CFAbsoluteTime).
    public func now() -> Double { store.now() }

    public func row(rowid: Int64) throws(KeychainError) -> ItemRow? { try store.table.row(rowid: rowid) }

    /// Every row of one class and protection class, until `body` says false.
    public func forEachRow(of cls: ItemClass, protection pdmn: Protection,
                           _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        try store.table.forEachRow(of: cls, protection: pdmn, body)
    }

    /// Every row `filter` selects, until `body` says false.
    public func forEachRow(matching filter: RowFilter, _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        try store.table.forEach(filter, body)
    }

    /// A row's attributes and secret, opened with its class key; errSecDecode if it was altered.
    public func open(_ row: ItemRow, classKey: SecureKey) throws(KeychainError) -> (attributes: AttributeDictionary, data: SecretBytes) {
        let item = try store.codec.open(row, classKey: classKey, withAttributes: true)
        return (item.attributes, item.data)
    }

    /// The row for an item (whose attributes hold agrp, pdmn, sync, cdat and mdat), sealed.
    public func seal(_ cls: ItemClass, attributes: AttributeDictionary, data: SecretBytes, persistentID: [UInt8],
                     classKey: SecureKey, rowid: Int64 = 0) -> ItemRow {
        store.codec.seal(cls, attributes: attributes, data: data, persistentID: persistentID, classKey: classKey, rowid: rowid)
    }

    /// A persistent id for an item added now.
    public func newPersistentID() -> [UInt8] { PersistentID.make(at: store.now()) }

    /// This device's lookup hashes of an item's attributes: how its row is found by them.
    public func lookupHashes(of cls: ItemClass, _ attributes: AttributeDictionary) -> [String: [UInt8]] {
        store.codec.hashes(of: cls, attributes)
    }

    /// The row identity a blob authenticates (what opens a blob kept apart from its row).
    public func blobIdentity(of row: ItemRow) -> [UInt8] { store.codec.identity(of: row) }

    public func insert(_ row: ItemRow) throws(KeychainError) -> Int64 { try store.table.insert(row) }

    public func replace(_ row: ItemRow) throws(KeychainError) { try store.table.replace(row) }

    /// Deletes an item; its pending entry in the outbox goes with it, and nothing is queued.
    public func delete(rowid: Int64) throws(KeychainError) { try store.table.delete(rowid: rowid) }

    /// Marks the version of item `rowid` that the other devices hold.
    public func stamp(_ stamp: ReplicaStamp, rowid: Int64) throws(KeychainError) {
        try store.table.setStamp(stamp, rowid: rowid)
    }

    public func clearStamp(rowid: Int64) throws(KeychainError) { try store.table.clearStamp(rowid: rowid) }

    /// Queues item `rowid`'s current version to be sent, as a local write would.
    public func queueVersion(item rowid: Int64) throws(KeychainError) {
        try store.outbox.queueVersion(item: rowid)
    }

    /// CFAbsoluteTime as milliseconds since 2001, rounded down (a date before 2001 or beyond
    /// Int64 is clamped, never a trap): the unit of a version's mdat.
    public static func milliseconds(_ seconds: Double) -> Int64 { Outbox.milliseconds(seconds) }
}

extension ItemStore {
    /// This store's replica port.
    public var replica: ItemReplica { ItemReplica(store: self) }
}
