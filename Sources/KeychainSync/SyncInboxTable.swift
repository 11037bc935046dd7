import KeychainModel
import KeychainStorage

/// The table sync_inbox: pulled rows whose class key is not loaded (ak while locked), kept
/// exactly as received, still sealed under the circle's record key, until the unlock lets
/// them be applied (docs/sync.md, 2.2). One row per record: the store's later state of a
/// record supersedes an earlier one waiting here.
public struct SyncInboxTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// Keeps `row` unless a greater version of the same record already waits.
    public func hold(_ row: SyncRecordRow) throws(KeychainError) {
        try db.run("""
            INSERT INTO sync_inbox(record_id, seq, epoch, mdat, writer, counter, tombstone, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(record_id) DO UPDATE SET seq = excluded.seq, epoch = excluded.epoch, mdat = excluded.mdat,
              writer = excluded.writer, counter = excluded.counter, tombstone = excluded.tombstone, body = excluded.body
            WHERE (excluded.mdat, excluded.writer, excluded.counter) > (mdat, writer, counter)
            """, [
            .blob(row.recordID), .int(row.seq), .int(Int64(row.epoch)), .int(row.version.mdat), .blob(row.version.writer.bytes),
            .int(row.version.counter), .int(row.tombstone ? 1 : 0), .blob(row.body),
        ])
    }

    /// Every waiting row, in the store's order. A row edited into an impossible epoch or
    /// writer id is errSecDecode.
    public func rows() throws(KeychainError) -> [SyncRecordRow] {
        try db.query("SELECT record_id, seq, epoch, mdat, writer, counter, tombstone, body FROM sync_inbox ORDER BY seq") { (s) throws(KeychainError) in
            var out: [SyncRecordRow] = []
            while try s.step() {
                let epoch = s.int(2)
                guard epoch >= 0, epoch <= Int64(UInt32.max) else {
                    throw KeychainError(.decode, "a sync inbox row holds an impossible epoch: it was altered")
                }
                let version = SyncVersion(mdat: s.int(3), writer: try SyncDeviceID(s.blob(4)), counter: s.int(5))
                out.append(SyncRecordRow(recordID: s.blob(0), seq: s.int(1), epoch: UInt32(epoch), version: version,
                                         tombstone: s.int(6) != 0, body: s.blob(7)))
            }
            return out
        }
    }

    public func delete(recordID: [UInt8]) throws(KeychainError) {
        try db.run("DELETE FROM sync_inbox WHERE record_id = ?", [.blob(recordID)])
    }

    public func count() throws(KeychainError) -> Int {
        try db.query("SELECT count(*) FROM sync_inbox") { (s) throws(KeychainError) in try s.step() ? Int(s.int(0)) : 0 }
    }
}
