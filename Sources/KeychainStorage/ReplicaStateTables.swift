import KeychainModel

/// The rows a replicator keeps beside the items (KeychainSync's outbox, identity, circle,
/// keys, roster and heads seen: docs/sync.md, 7.3) that are sealed under the class keys or
/// make sense only with what is: an erase, which replaces those keys, drops them with the
/// items, and the keychain is a new device.
///
/// Named here by table, not through the replicator's types: the schema that creates these
/// tables lives with the database (Schema.swift), and the store that erases must not link the
/// replicator (docs/sync.md, "Where the code lives"). The same tables as before the move: the
/// inbox and the writers' counters were never among them.
public enum ReplicaStateTables {
    static let erasedWithTheClassKeys = ["sync_outbox", "sync_identity", "sync_circle", "sync_keys", "sync_roster", "sync_heads_seen"]

    /// Inside the caller's transaction.
    public static func deleteAll(_ db: SQLiteDatabase) throws(KeychainError) {
        for table in erasedWithTheClassKeys { try db.run("DELETE FROM \(table)") }
        // KeychainSync's own table of kept deletes (LocalTombstones), made on first use.
        try db.execute("DROP TABLE IF EXISTS sync_local_tombstones")
    }
}
