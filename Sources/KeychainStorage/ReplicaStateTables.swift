import KeychainModel

/// The rows a replicator keeps beside the items (KeychainSync's outbox, identity, circle,
/// keys, roster and heads seen: docs/sync.md, 7.3) that are sealed under the class keys or
/// make sense only with what is: an erase, which replaces those keys, drops them with the
/// items, and the keychain is a new device.
public enum ReplicaStateTables {
    /// Inside the caller's transaction.
    public static func deleteAll(_ db: SQLiteDatabase) throws(KeychainError) {
        try OutboxTable(db).deleteAll()
        try db.run("DELETE FROM sync_identity")
        try SyncCircleTable(db).delete()
        try SyncKeysTable(db).deleteAll()
        try SyncRosterTable(db).deleteAll()
        try SyncHeadsSeenTable(db).replace(with: [:])
    }
}
