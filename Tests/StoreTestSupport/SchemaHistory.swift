import KeychainStorage

// How the migration tests make an older database: each function takes a database back one
// schema version, as a keychaind of then left it. One copy for KeychainStoreTests and
// KeychainSyncTests: two copies drifted once (schema 9's login_slot was undone in one only,
// and the other's migration tests then failed with "table login_slot already exists").

/// Takes a database back to schema version 5.
public func undoSchemaV6(_ db: SQLiteDatabase) throws {
    try undoSchemaV7(db)
    for table in ["sync_outbox", "sync_inbox", "sync_identity", "sync_circle", "sync_keys", "sync_roster", "sync_writers_seen"] {
        try db.execute("DROP TABLE \(table)")
    }
    try db.execute("ALTER TABLE items DROP COLUMN sync_writer")
    try db.execute("ALTER TABLE items DROP COLUMN sync_counter")
    try db.execute("PRAGMA user_version = 5")
}

/// Takes a database back to schema version 8 (no login slot).
public func undoSchemaV9(_ db: SQLiteDatabase) throws {
    try db.execute("DROP TABLE login_slot")
    try db.execute("PRAGMA user_version = 8")
}

/// Takes a database back to schema version 7 (no remembered heads, no pending rollback).
public func undoSchemaV8(_ db: SQLiteDatabase) throws {
    try undoSchemaV9(db)
    try db.execute("DROP TABLE sync_heads_seen")
    try db.execute("ALTER TABLE sync_circle DROP COLUMN rollback")
    try db.execute("PRAGMA user_version = 7")
}

/// Takes a database back to schema version 6 (no stamp mdat).
public func undoSchemaV7(_ db: SQLiteDatabase) throws {
    try undoSchemaV8(db)
    try db.execute("ALTER TABLE items DROP COLUMN sync_mdat")
    try db.execute("PRAGMA user_version = 6")
}
