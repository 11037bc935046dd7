import KeychainModel

/// The protection classes (pdmn values) whose rows may still carry lookup hashes from before
/// schema version 4, when a number in a blob attribute hashed as its decimal text. A class
/// leaves the list once its rows are rehashed; a new database starts with an empty list.
public struct NumberRehashTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// The pdmn values still to rehash, as stored (an altered row may have left one that is
    /// no protection class).
    public func pending() throws(KeychainError) -> [String] {
        try db.query("SELECT pdmn FROM number_rehash ORDER BY pdmn") { (s) throws(KeychainError) in
            var out: [String] = []
            while try s.step() { out.append(s.text(0)) }
            return out
        }
    }

    public func markDone(_ pdmn: String) throws(KeychainError) {
        try db.run("DELETE FROM number_rehash WHERE pdmn = ?", [.text(pdmn)])
    }
}
