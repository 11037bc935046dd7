import KeychainModel
import KeychainStorage

/// What the one row of `sync_circle` says (docs/sync.md, 7.3): which circle this device is in,
/// at which epoch, how far it has pulled, and how many writes it has numbered.
public struct SyncCircleRow: Sendable, Equatable {
    public var circleID: [UInt8]
    public var epoch: UInt32
    /// The last seq pulled from the store.
    public var cursor: Int64
    /// The last counter this device gave one of its writes (its next write is counter + 1).
    public var counter: Int64
    /// When the last complete pull ended, in ms since 2001; nil before the first.
    public var lastFullPull: Int64?
    public var state: String
    /// The store's roster as this device last saw it (a shorter one later is a rollback).
    public var storeRosterLength: Int
    public var storeRosterHash: [UInt8]?
    /// Why the store was found rolled back, while the heal has not finished (docs/sync.md, 6).
    public var rollback: String?

    public init(circleID: [UInt8], epoch: UInt32, cursor: Int64 = 0, counter: Int64 = 0, lastFullPull: Int64? = nil,
                state: String, storeRosterLength: Int = 0, storeRosterHash: [UInt8]? = nil, rollback: String? = nil) {
        self.circleID = circleID
        self.epoch = epoch
        self.cursor = cursor
        self.counter = counter
        self.lastFullPull = lastFullPull
        self.state = state
        self.storeRosterLength = storeRosterLength
        self.storeRosterHash = storeRosterHash
        self.rollback = rollback
    }
}

/// The table sync_circle: at most one row, present from the moment this device founds or
/// joins a circle. Membership code writes the row; the push and pull code moves the cursor
/// and the counter, inside the local transaction that applies or stamps what they count.
public struct SyncCircleTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    public func row() throws(KeychainError) -> SyncCircleRow? {
        try db.query("""
            SELECT circle_id, epoch, cursor, counter, last_full_pull, state, store_roster_length, store_roster_hash, rollback
            FROM sync_circle WHERE id = 1
            """) { (s) throws(KeychainError) -> SyncCircleRow? in
            guard try s.step() else { return nil }
            let epoch = s.int(1)
            guard epoch >= 1, epoch <= Int64(UInt32.max), s.int(6) >= 0 else {
                throw KeychainError(.decode, "the sync circle row holds an impossible epoch or roster length: it was altered")
            }
            return SyncCircleRow(circleID: s.blob(0), epoch: UInt32(epoch), cursor: s.int(2), counter: s.int(3),
                                 lastFullPull: s.isNull(4) ? nil : s.int(4), state: s.text(5),
                                 storeRosterLength: Int(s.int(6)), storeRosterHash: s.isNull(7) ? nil : s.blob(7),
                                 rollback: s.isNull(8) ? nil : s.text(8))
        }
    }

    /// Writes the whole row (founding, joining, or a new epoch).
    public func save(_ row: SyncCircleRow) throws(KeychainError) {
        try db.run("""
            INSERT INTO sync_circle(id, circle_id, epoch, cursor, counter, last_full_pull, state, store_roster_length, store_roster_hash,
              rollback)
            VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT(id) DO UPDATE SET circle_id = excluded.circle_id, epoch = excluded.epoch, cursor = excluded.cursor,
              counter = excluded.counter, last_full_pull = excluded.last_full_pull, state = excluded.state,
              store_roster_length = excluded.store_roster_length, store_roster_hash = excluded.store_roster_hash,
              rollback = excluded.rollback
            """, [
            .blob(row.circleID), .int(Int64(row.epoch)), .int(row.cursor), .int(row.counter),
            row.lastFullPull.map { .int($0) } ?? .null, .text(row.state), .int(Int64(row.storeRosterLength)),
            row.storeRosterHash.map { .blob($0) } ?? .null, row.rollback.map { .text($0) } ?? .null,
        ])
    }

    /// Numbers the next write of this device: the counter after the last one given. Call it in
    /// the transaction that stamps the item with the number, so a number is never given twice.
    public func nextCounter() throws(KeychainError) -> Int64 {
        try db.run("UPDATE sync_circle SET counter = counter + 1 WHERE id = 1")
        guard db.changes == 1 else { throw KeychainError(.notAvailable, "this keychain is in no sync circle") }
        guard let row = try row() else { throw KeychainError(.notAvailable, "this keychain is in no sync circle") }
        return row.counter
    }

    public func setCursor(_ cursor: Int64) throws(KeychainError) {
        try db.run("UPDATE sync_circle SET cursor = ? WHERE id = 1", [.int(cursor)])
    }

    /// When a pull that read every row reached the end (ms since 2001): from then on a
    /// writer's counters only rise after the cursor.
    public func setLastFullPull(_ mdat: Int64) throws(KeychainError) {
        try db.run("UPDATE sync_circle SET last_full_pull = ? WHERE id = 1", [.int(mdat)])
    }

    /// Marks a rollback found (its reason) or healed (nil).
    public func setRollback(_ reason: String?) throws(KeychainError) {
        try db.run("UPDATE sync_circle SET rollback = ? WHERE id = 1", [reason.map { .text($0) } ?? .null])
    }

    /// Forgets how far this device has pulled, so the next pull reads every row again as a
    /// full pull (after a rollback, what the store holds below the cursor changed).
    public func restartPull() throws(KeychainError) {
        try db.run("UPDATE sync_circle SET cursor = 0, last_full_pull = NULL WHERE id = 1")
    }

    public func setState(_ state: String) throws(KeychainError) {
        try db.run("UPDATE sync_circle SET state = ? WHERE id = 1", [.text(state)])
    }

    /// Leaving the circle: the row goes (the keys and roster are dropped by their own tables).
    public func delete() throws(KeychainError) {
        try db.run("DELETE FROM sync_circle")
    }
}
