import KeychainModel

/// The wrong-passcode counter, kept in the database so that restarting the daemon does not
/// reset the escalating delay.
public struct LockoutTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// Failures in a row and when the last was (seconds since 1970); (0, 0) when none is saved.
    public func load() throws(KeychainError) -> (failures: Int, lastFailure: Double) {
        try db.query("SELECT failures, last_failure FROM lockout WHERE id = 1") { (s) throws(KeychainError) in
            try s.step() ? (Int(s.int(0)), s.double(1)) : (0, 0)
        }
    }

    public func save(failures: Int, lastFailure: Double) throws(KeychainError) {
        try db.run("""
            INSERT INTO lockout(id, failures, last_failure) VALUES (1, ?, ?)
            ON CONFLICT(id) DO UPDATE SET failures = excluded.failures, last_failure = excluded.last_failure
            """, [.int(Int64(failures)), .double(lastFailure)])
    }
}
