import KeychainModel

/// The login slot's row: its sealed record (LoginSlot's format, in KeychainCrypto; opaque
/// here), or none, and its own wrong-password counter, which is never the passcode's.
public struct LoginSlotTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// The stored slot, or nil when there is none.
    public func record() throws(KeychainError) -> [UInt8]? {
        try db.query("SELECT record FROM login_slot WHERE id = 1") { (s) throws(KeychainError) in
            try s.step() && !s.isNull(0) ? s.blob(0) : nil
        }
    }

    /// Replaces the slot (nil: removes it); the counter stays.
    public func save(_ record: [UInt8]?) throws(KeychainError) {
        try db.run("""
            INSERT INTO login_slot(id, record) VALUES (1, ?)
            ON CONFLICT(id) DO UPDATE SET record = excluded.record
            """, [record.map { .blob($0) } ?? .null])
    }

    /// Failures in a row and when the last was (seconds since 1970); (0, 0) when none is saved.
    public func failures() throws(KeychainError) -> (failures: Int, lastFailure: Double) {
        try db.query("SELECT failures, last_failure FROM login_slot WHERE id = 1") { (s) throws(KeychainError) in
            try s.step() ? (Int(s.int(0)), s.double(1)) : (0, 0)
        }
    }

    public func saveFailures(_ failures: Int, lastFailure: Double) throws(KeychainError) {
        try db.run("""
            INSERT INTO login_slot(id, failures, last_failure) VALUES (1, ?, ?)
            ON CONFLICT(id) DO UPDATE SET failures = excluded.failures, last_failure = excluded.last_failure
            """, [.int(Int64(failures)), .double(lastFailure)])
    }
}
