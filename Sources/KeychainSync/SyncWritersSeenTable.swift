import KeychainModel
import KeychainStorage

/// The table sync_writers_seen, as the pull's replay check uses it (docs/sync.md, 6): per
/// writer, the highest counter this device has seen after its cursor. Its head columns are
/// unused: the rollback check keeps its heads in sync_heads_seen (schema v8).
public struct SyncWritersSeenTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// Every writer's highest counter. A row edited into an impossible writer id is errSecDecode.
    public func ledger() throws(KeychainError) -> SyncWriterLedger {
        try db.query("SELECT writer, highest_counter FROM sync_writers_seen") { (s) throws(KeychainError) in
            var highest: [SyncDeviceID: Int64] = [:]
            while try s.step() { highest[try SyncDeviceID(s.blob(0))] = s.int(1) }
            return SyncWriterLedger(highestCounter: highest)
        }
    }

    /// Stores the ledger's counters; a stored counter never goes down. Call it in the
    /// transaction that applies the rows the ledger admitted.
    public func save(_ ledger: SyncWriterLedger) throws(KeychainError) {
        for (writer, counter) in ledger.highestCounter {
            try db.run("""
                INSERT INTO sync_writers_seen(writer, highest_counter) VALUES (?, ?)
                ON CONFLICT(writer) DO UPDATE SET highest_counter = max(highest_counter, excluded.highest_counter)
                """, [.blob(writer.bytes), .int(counter)])
        }
    }
}
