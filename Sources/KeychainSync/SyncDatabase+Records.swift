import KeychainCrypto
import KeychainModel

/// How a push ended (docs/sync.md, 7.1).
public enum SyncPushOutcome: Sendable, Equatable {
    /// Committed. `lastSeq` is the last seq the push was handed (0 when it carried no row);
    /// `lost` holds the record ids whose row in the store has a greater version than the one
    /// pushed: the caller pulls the winner. A row the store already held with exactly the
    /// pushed version (a retry after a lost COMMIT acknowledgement) is not lost.
    case pushed(lastSeq: Int64, lost: Set<[UInt8]>)
    /// The circle is at another epoch than the push's (a rotation): the batch that found it
    /// wrote nothing. Earlier batches of the same call may have committed; pushing every row
    /// again after re-sealing is safe, as the tuple rule makes a repeated version a no-op.
    case epochMoved(current: UInt32)
}

/// One pull: the rows read after a cursor, in seq order (docs/sync.md, 7.1).
public struct SyncPullBatch: Sendable, Equatable {
    public var rows: [SyncRecordRow]
    /// Rows of the store that no device could have written through `push` (a record id not of
    /// 32 bytes, a writer not of 16, an epoch below 1): an edit behind the devices' back. They
    /// are skipped rather than failing the batch, since any holder of write access to the
    /// table could otherwise stop every device's sync with one row; the caller counts them
    /// with the rejected ones.
    public var malformed: Int
    /// The highest seq read, malformed rows included, or the cursor given when nothing was:
    /// the next pull's cursor.
    public var lastSeq: Int64
    /// Whether the store held fewer rows past the cursor than the limit, so this pull reached
    /// the end of what was committed when it ran.
    public var reachedEnd: Bool

    public init(rows: [SyncRecordRow], malformed: Int, lastSeq: Int64, reachedEnd: Bool) {
        self.rows = rows
        self.malformed = malformed
        self.lastSeq = lastSeq
        self.reachedEnd = reachedEnd
    }
}

/// The statements of record exchange (docs/sync.md, 5, 6 and 7.1): push, pull, heads, the
/// circle's epoch and seq, and tombstone expiry.
extension SyncDatabase {
    /// The most rows one push transaction carries: a longer push is split, so that a
    /// transaction holds the circle row's lock (every other writer's wait) for milliseconds.
    public static let pushBatchLimit = 500

    /// Pushes `rows` (all of epoch `epoch`) and this device's `head` in transactions of at most
    /// `pushBatchLimit` rows. Each transaction takes the seqs for its rows from the circle row
    /// (whose lock then serializes it with every other push of the circle, so commit order is
    /// seq order), upserts each row with the tuple rule of section 5, and notifies the circle's
    /// channel with its last seq if it wrote any row. The head goes in the last transaction,
    /// so it never names writes that did not commit.
    ///
    /// Refused before anything is sent (errSecParam): a row of another epoch, a record id not
    /// of 32 bytes, a head of another circle or epoch. Refused in the store, rolling back the
    /// transaction that found it (errSecParam): a head lower than the one the store holds for
    /// this device (its writes were numbered past this head: this device's own state went
    /// back). No such circle: errSecItemNotFound.
    public func push(circleID: SyncCircleID, epoch: UInt32, rows: [SyncRecordRow], head: SyncHead) throws(KeychainError) -> SyncPushOutcome {
        try Self.checkPush(circleID: circleID, epoch: epoch, rows: rows, head: head)
        var lost: Set<[UInt8]> = []
        var lastSeq: Int64 = 0
        var start = 0
        repeat {
            let end = min(start + Self.pushBatchLimit, rows.count)
            let isLast = end == rows.count
            switch try pushBatch(circleID: circleID, epoch: epoch, rows: rows[start..<end], head: isLast ? head : nil) {
            case .epochMoved(let current):
                return .epochMoved(current: current)
            case .pushed(let seq, let batchLost):
                if end > start { lastSeq = seq }
                lost.formUnion(batchLost)
            }
            start = end
        } while start < rows.count
        return .pushed(lastSeq: lastSeq, lost: lost)
    }

    /// The rows after `cursor`, in seq order, at most `limit` of them (malformed ones skipped
    /// and counted, see SyncPullBatch).
    public func pull(circleID: SyncCircleID, after cursor: Int64, limit: Int) throws(KeychainError) -> SyncPullBatch {
        guard limit >= 1 else { throw KeychainError(.param, "a pull needs a limit of at least 1 row, not \(limit)") }
        let result = try connection.query("""
            SELECT record_id, seq, epoch, mdat, writer, counter, tombstone, body FROM sync_records
            WHERE circle_id = $1 AND seq > $2 ORDER BY seq LIMIT $3
            """, [.bytea(circleID.bytes), .int(cursor), .int(Int64(limit))])
        var batch = SyncPullBatch(rows: [], malformed: 0, lastSeq: cursor, reachedEnd: result.rows.count < limit)
        batch.rows.reserveCapacity(result.rows.count)
        for values in result.rows {
            // The seq orders the pull and becomes the cursor; a row without one cannot be passed over safely.
            guard values.count == 8, let seq = values[1].int, seq > batch.lastSeq else {
                throw KeychainError(.decode, "the store returned a record row without a seq above the cursor: the table sync_records was altered")
            }
            batch.lastSeq = seq
            if let row = Self.recordRow(values, seq: seq) {
                batch.rows.append(row)
            } else {
                batch.malformed += 1
            }
        }
        return batch
    }

    /// Every device's head in the circle, as the store holds them (unverified: the caller
    /// checks signatures against its roster). A head row of an impossible shape is left out,
    /// which a caller that remembered that device's head reads as the rollback it is.
    public func heads(circleID: SyncCircleID) throws(KeychainError) -> [SyncHead] {
        let result = try connection.query("""
            SELECT device_id, epoch, counter, roster_len, roster_hash, sig FROM sync_heads
            WHERE circle_id = $1 ORDER BY device_id
            """, [.bytea(circleID.bytes)])
        return result.rows.compactMap { Self.head($0, circleID: circleID) }
    }

    /// The circle's epoch and last seq handed out; nil if the store has no such circle.
    public func circleState(circleID: SyncCircleID) throws(KeychainError) -> (epoch: UInt32, seq: Int64)? {
        let result = try connection.query("SELECT epoch, seq FROM sync_circles WHERE circle_id = $1", [.bytea(circleID.bytes)])
        guard let row = result.rows.first else { return nil }
        guard row.count == 2, let epoch = row[0].int.flatMap(Self.epoch), let seq = row[1].int, seq >= 0 else {
            throw KeychainError(.decode, "the store's circle row holds an impossible epoch or seq: the table sync_circles was altered")
        }
        return (epoch, seq)
    }

    /// How many roster entries the store holds for the circle (a roster shorter than the one
    /// a device verified is a rollback, section 6).
    public func rosterLength(circleID: SyncCircleID) throws(KeychainError) -> Int {
        let result = try connection.query("SELECT count(*) FROM sync_roster WHERE circle_id = $1", [.bytea(circleID.bytes)])
        return Int(result.rows.first?.first?.int ?? 0)
    }

    /// The version of every record the store holds for the circle, by record id: what a heal
    /// compares this device's items with (section 6). Malformed rows are left out.
    public func versions(circleID: SyncCircleID) throws(KeychainError) -> [[UInt8]: SyncVersion] {
        let result = try connection.query("SELECT record_id, mdat, writer, counter FROM sync_records WHERE circle_id = $1",
                                          [.bytea(circleID.bytes)])
        var out: [[UInt8]: SyncVersion] = [:]
        out.reserveCapacity(result.rows.count)
        for row in result.rows {
            guard row.count == 4, let recordID = row[0].bytes, recordID.count == 32, let mdat = row[1].int,
                  let writer = row[2].bytes.flatMap({ try? SyncDeviceID($0) }), let counter = row[3].int else { continue }
            out[recordID] = SyncVersion(mdat: mdat, writer: writer, counter: counter)
        }
        return out
    }

    /// Raises the circle's seq to at least `seq` (a heal's first step, section 6): the rows it
    /// pushes then get seqs above every one the healing device pulled, so a device whose cursor
    /// is below that reads them all, and one whose cursor is above it already holds what they
    /// carry. Under the circle row's lock, like a push. False if the circle is at another epoch.
    public func raiseSeq(circleID: SyncCircleID, epoch: UInt32, atLeast seq: Int64) throws(KeychainError) -> Bool {
        try connection.query("UPDATE sync_circles SET seq = greatest(seq, $3) WHERE circle_id = $1 AND epoch = $2",
                             [.bytea(circleID.bytes), .int(Int64(epoch)), .int(seq)]).affectedRows == 1
    }

    /// Deletes the circle's tombstones whose mdat (ms since 2001) is below `mdat` (section 5:
    /// the caller passes now minus 60 days); returns how many went.
    public func expireTombstones(circleID: SyncCircleID, olderThan mdat: Int64) throws(KeychainError) -> Int {
        try connection.query("DELETE FROM sync_records WHERE circle_id = $1 AND tombstone AND mdat < $2",
                             [.bytea(circleID.bytes), .int(mdat)]).affectedRows
    }

    // MARK: Internals

    private static func checkPush(circleID: SyncCircleID, epoch: UInt32, rows: [SyncRecordRow], head: SyncHead) throws(KeychainError) {
        guard Self.epoch(Int64(epoch)) != nil else {
            throw KeychainError(.param, "a push's epoch must be between 1 and \(Int32.max), not \(epoch)")
        }
        guard head.circleID == circleID, head.epoch == epoch else {
            throw KeychainError(.param, "the head pushed is of another circle or epoch than its rows")
        }
        for row in rows {
            guard row.epoch == epoch else {
                throw KeychainError(.param, "a row of epoch \(row.epoch) cannot be pushed with epoch \(epoch); nothing was sent")
            }
            guard row.recordID.count == 32 else {
                throw KeychainError(.param, "a record id is 32 bytes, not \(row.recordID.count); nothing was sent")
            }
        }
    }

    /// One transaction of a push: at most `pushBatchLimit` rows, and the head if it is the last.
    private func pushBatch(circleID: SyncCircleID, epoch: UInt32, rows: ArraySlice<SyncRecordRow>, head: SyncHead?) throws(KeychainError) -> SyncPushOutcome {
        let circle = PostgresValue.bytea(circleID.bytes)
        return try connection.transaction { (c) throws(KeychainError) -> SyncPushOutcome in
            // Takes the seqs and the circle row's lock until commit (7.1, "Cursor and commit order").
            let taken = try c.query("UPDATE sync_circles SET seq = seq + $3 WHERE circle_id = $1 AND epoch = $2 RETURNING seq",
                                    [circle, .int(Int64(epoch)), .int(Int64(rows.count))])
            guard let last = taken.rows.first?.first?.int else {
                guard let stored = try c.query("SELECT epoch FROM sync_circles WHERE circle_id = $1", [circle]).rows.first?.first else {
                    throw KeychainError(.itemNotFound, "the store has no sync circle with this id")
                }
                guard let current = stored.int.flatMap(Self.epoch) else {
                    throw KeychainError(.decode, "the store's circle row holds an impossible epoch: the table sync_circles was altered")
                }
                return .epochMoved(current: current)
            }
            var seq = last - Int64(rows.count)
            var lost: Set<[UInt8]> = []
            var wrote = false
            for row in rows {
                seq += 1
                if try upsert(row, seq: seq, circle: circle, on: c) {
                    wrote = true
                } else if try storedVersion(of: row.recordID, circle: circle, on: c) != row.version {
                    lost.insert(row.recordID)
                }
            }
            if let head { try upsertHead(head, circle: circle, on: c) }
            if wrote { try c.notify(Self.channel(circleID: circleID.bytes), payload: String(last)) }
            return .pushed(lastSeq: last, lost: lost)
        }
    }

    /// Writes `row` unless the store holds a version at least as great (section 5); true if it
    /// was written.
    private func upsert(_ row: SyncRecordRow, seq: Int64, circle: PostgresValue, on c: PostgresConnection) throws(KeychainError) -> Bool {
        try c.query("""
            INSERT INTO sync_records AS r (circle_id, record_id, seq, epoch, mdat, writer, counter, tombstone, body)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            ON CONFLICT (circle_id, record_id) DO UPDATE SET
              seq = excluded.seq, epoch = excluded.epoch, mdat = excluded.mdat, writer = excluded.writer,
              counter = excluded.counter, tombstone = excluded.tombstone, body = excluded.body
            WHERE (excluded.mdat, excluded.writer, excluded.counter) > (r.mdat, r.writer, r.counter)
            """, [circle, .bytea(row.recordID), .int(seq), .int(Int64(row.epoch)), .int(row.version.mdat),
                  .bytea(row.version.writer.bytes), .int(row.version.counter), .bool(row.tombstone), .bytea(row.body)])
            .affectedRows == 1
    }

    /// The version the store holds for a record (the one that kept a push from writing).
    private func storedVersion(of recordID: [UInt8], circle: PostgresValue, on c: PostgresConnection) throws(KeychainError) -> SyncVersion? {
        let result = try c.query("SELECT mdat, writer, counter FROM sync_records WHERE circle_id = $1 AND record_id = $2",
                                 [circle, .bytea(recordID)])
        guard let row = result.rows.first, row.count == 3, let mdat = row[0].int, let writer = row[1].bytes,
              let counter = row[2].int, let device = try? SyncDeviceID(writer) else { return nil }
        return SyncVersion(mdat: mdat, writer: device, counter: counter)
    }

    /// Writes this device's head, never lowering what the store holds for it: a device's
    /// counter, roster length and epoch only grow, so a lower head means its own state went
    /// back (a restored copy) and its new writes would reuse counters that peers reject.
    private func upsertHead(_ head: SyncHead, circle: PostgresValue, on c: PostgresConnection) throws(KeychainError) {
        let written = try c.query("""
            INSERT INTO sync_heads AS h (circle_id, device_id, epoch, counter, roster_len, roster_hash, sig)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (circle_id, device_id) DO UPDATE SET
              epoch = excluded.epoch, counter = excluded.counter, roster_len = excluded.roster_len,
              roster_hash = excluded.roster_hash, sig = excluded.sig
            WHERE excluded.epoch >= h.epoch AND excluded.counter >= h.counter AND excluded.roster_len >= h.roster_len
            """, [circle, .bytea(head.device.bytes), .int(Int64(head.epoch)), .int(head.counter),
                  .int(Int64(head.rosterLength)), .bytea(head.rosterHash), .bytea(head.signature)]).affectedRows
        guard written == 1 else {
            throw KeychainError(.param, "the store holds a later head of this device (counter, roster length or epoch above the pushed \(head.counter), \(head.rosterLength), \(head.epoch)): this device's sync state went back; nothing was pushed in this transaction")
        }
    }

    static func recordRow(_ values: [PostgresValue], seq: Int64) -> SyncRecordRow? {
        guard let recordID = values[0].bytes, recordID.count == 32,
              let epoch = values[2].int.flatMap(Self.epoch),
              let mdat = values[3].int,
              let writer = values[4].bytes.flatMap({ try? SyncDeviceID($0) }),
              let counter = values[5].int,
              let tombstone = values[6].bool,
              let body = values[7].bytes else { return nil }
        return SyncRecordRow(recordID: recordID, seq: seq, epoch: epoch,
                             version: SyncVersion(mdat: mdat, writer: writer, counter: counter),
                             tombstone: tombstone, body: body)
    }

    private static func head(_ values: [PostgresValue], circleID: SyncCircleID) -> SyncHead? {
        guard values.count == 6,
              let device = values[0].bytes.flatMap({ try? SyncDeviceID($0) }),
              let epoch = values[1].int.flatMap(Self.epoch),
              let counter = values[2].int,
              let rosterLength = values[3].int, rosterLength >= 1, rosterLength <= Int64(UInt32.max),
              let rosterHash = values[4].bytes, rosterHash.count == 32,
              let signature = values[5].bytes, signature.count == 64 else { return nil }
        return SyncHead(circleID: circleID, epoch: epoch, device: device, counter: counter,
                        rosterLength: UInt32(rosterLength), rosterHash: rosterHash, signature: signature)
    }

    /// An epoch as the store's `integer` columns can hold it: 1 ... Int32.max.
    private static func epoch(_ value: Int64) -> UInt32? {
        (1...Int64(Int32.max)).contains(value) ? UInt32(value) : nil
    }
}
