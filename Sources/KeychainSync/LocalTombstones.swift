import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// The deletes this device made or applied, kept for `window` after the store's tombstone
/// has been pushed or pulled (docs/sync.md, 5, "Local tombstones"): a record whose item was
/// deleted here is not brought back by an older version of it that the store serves again
/// (a restored backup, a row written back by its operator), and the delete is pushed again.
///
/// One row per record: its tag (the record id keyed again under the circle key, so neither
/// the file alone nor the file with a copy of the store names the item), the epoch of the
/// key, the delete's version (what an older write is compared with) and when it was kept
/// here. No attribute, no blob. The table is this module's own, made on the first delete it
/// keeps, so a keychain outside any circle has none.
public struct LocalTombstones {
    /// How long a delete is kept after it reached or left this device: Apple's 30 days. A
    /// store restored from further back than this brings the item back (docs/sync.md, 5).
    public static let window: Int64 = 30 * 24 * 3600 * 1000

    let replica: ItemReplica

    public init(_ replica: ItemReplica) { self.replica = replica }

    private var database: SQLiteDatabase { replica.database }

    /// The deletes kept for records of `circleKey`'s epoch, by tag.
    func kept(circleKey: SyncCircleKey) throws(KeychainError) -> [[UInt8]: SyncVersion] {
        guard try exists() else { return [:] }
        return try database.query("SELECT tag, mdat, writer, counter FROM sync_local_tombstones WHERE epoch = ?",
                                  [.int(Int64(circleKey.epoch))]) { (s) throws(KeychainError) in
            var out: [[UInt8]: SyncVersion] = [:]
            while try s.step() {
                // A row edited into an impossible writer is no delete of a member: ignored.
                guard let writer = try? SyncDeviceID(s.blob(2)) else { continue }
                out[s.blob(0)] = SyncVersion(mdat: s.int(1), writer: writer, counter: s.int(3))
            }
            return out
        }
    }

    /// Keeps the delete `version` of `recordID` (in the caller's transaction); a greater
    /// version already kept stays, and the window starts again at `now`.
    func keep(recordID: [UInt8], version: SyncVersion, circleKey: SyncCircleKey, now: Int64) throws(KeychainError) {
        try database.execute("""
            CREATE TABLE IF NOT EXISTS sync_local_tombstones (
              tag BLOB PRIMARY KEY, epoch INTEGER NOT NULL, mdat INTEGER NOT NULL, writer BLOB NOT NULL,
              counter INTEGER NOT NULL, kept INTEGER NOT NULL) WITHOUT ROWID
            """)
        try database.run("""
            INSERT INTO sync_local_tombstones(tag, epoch, mdat, writer, counter, kept) VALUES (?, ?, ?, ?, ?, ?)
            ON CONFLICT(tag) DO UPDATE SET mdat = excluded.mdat, writer = excluded.writer, counter = excluded.counter,
              kept = excluded.kept
            WHERE (excluded.mdat, excluded.writer, excluded.counter) > (mdat, writer, counter)
            """, [.blob(circleKey.tombstoneTag(recordID: recordID)), .int(Int64(circleKey.epoch)), .int(version.mdat),
                  .blob(version.writer.bytes), .int(version.counter), .int(now)])
    }

    /// Forgets the delete of `recordID`: a later version of the item is here again.
    func forget(recordID: [UInt8], circleKey: SyncCircleKey) throws(KeychainError) {
        guard try exists() else { return }
        try database.run("DELETE FROM sync_local_tombstones WHERE tag = ?", [.blob(circleKey.tombstoneTag(recordID: recordID))])
    }

    /// Drops the deletes kept longer than `window` before `now` (milliseconds since 2001) and
    /// those of another epoch than `epoch` (their tags can match no record of it). Commits
    /// nothing when none is due. Returns how many went.
    @discardableResult
    public func sweep(now: Int64, epoch: UInt32) throws(KeychainError) -> Int {
        guard try exists() else { return 0 }
        let due = "FROM sync_local_tombstones WHERE kept < ? OR epoch != ?"
        let values: [SQLValue] = [.int(now &- Self.window), .int(Int64(epoch))]
        let count = try database.query("SELECT count(*) \(due)", values) { (s) throws(KeychainError) in try s.step() ? Int(s.int(0)) : 0 }
        guard count > 0 else { return 0 }
        try database.transaction { () throws(KeychainError) in try database.run("DELETE \(due)", values) }
        return count
    }

    /// How many deletes are kept, for status and tests.
    public func count() throws(KeychainError) -> Int {
        guard try exists() else { return 0 }
        return try database.query("SELECT count(*) FROM sync_local_tombstones") { (s) throws(KeychainError) in
            try s.step() ? Int(s.int(0)) : 0
        }
    }

    /// On leaving the circle (inside the caller's transaction): the tags are of its keys.
    func deleteAll() throws(KeychainError) {
        try database.execute("DROP TABLE IF EXISTS sync_local_tombstones")
    }

    private func exists() throws(KeychainError) -> Bool {
        try database.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sync_local_tombstones'") { (s) throws(KeychainError) in
            try s.step()
        }
    }
}
