import KeychainModel

/// The keybag row: the one sealed record of the class keys (its format is KeybagRecord's,
/// in KeychainCrypto; here it is opaque bytes).
public struct KeybagTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// The stored record, or nil when the row is missing.
    public func record() throws(KeychainError) -> [UInt8]? {
        try db.query("SELECT record FROM keybag WHERE id = 1") { (s) throws(KeychainError) in try s.step() ? s.blob(0) : nil }
    }

    public func save(_ record: [UInt8]) throws(KeychainError) {
        try db.run("INSERT INTO keybag(id, record) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET record = excluded.record", [.blob(record)])
    }
}
