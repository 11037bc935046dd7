import KeychainModel
import KeychainStorage

/// The table sync_heads_seen (docs/sync.md, 6): per writer, the highest signed head this
/// device verified in the store, or pushed itself. A store showing a lower head, or none, for
/// a writer remembered here has been rolled back.
public struct SyncHeadsSeenTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// Every remembered head. A row edited into an impossible writer id is errSecDecode.
    public func heads() throws(KeychainError) -> [SyncDeviceID: SyncHeadPosition] {
        try db.query("SELECT writer, counter, roster_length FROM sync_heads_seen") { (s) throws(KeychainError) in
            var out: [SyncDeviceID: SyncHeadPosition] = [:]
            while try s.step() {
                out[try SyncDeviceID(s.blob(0))] = SyncHeadPosition(counter: s.int(1), rosterLength: Int(s.int(2)))
            }
            return out
        }
    }

    /// Raises the remembered heads to `heads` (a remembered head never goes down here).
    public func raise(_ heads: [SyncDeviceID: SyncHeadPosition]) throws(KeychainError) {
        for (writer, head) in heads {
            try db.run("""
                INSERT INTO sync_heads_seen(writer, counter, roster_length) VALUES (?, ?, ?)
                ON CONFLICT(writer) DO UPDATE SET counter = max(counter, excluded.counter),
                  roster_length = max(roster_length, excluded.roster_length)
                """, [.blob(writer.bytes), .int(head.counter), .int(Int64(head.rosterLength))])
        }
    }

    /// Replaces every remembered head with `heads`: after a heal, the store's state is the
    /// new baseline, lower heads included.
    public func replace(with heads: [SyncDeviceID: SyncHeadPosition]) throws(KeychainError) {
        try db.run("DELETE FROM sync_heads_seen")
        try raise(heads)
    }
}
