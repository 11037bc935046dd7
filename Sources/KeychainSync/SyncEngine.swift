#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import KeychainStore
import Synchronization

/// What the passes did, for `keychain sync status` (op 32). Totals since the engine was made.
public struct SyncPassTotals: Sendable, Equatable {
    /// Rows the store committed from this device's outbox.
    public var pushed = 0
    /// Rows read from the store after the cursor (malformed ones included).
    public var pulled = 0
    /// Pulled rows that changed an item here (or confirmed its absence), inbox rows included.
    public var applied = 0
    /// Pulled rows refused: not opening under the circle key, replays, malformed rows.
    public var rejected = 0
    /// Pulled rows that went to the inbox to wait for their class key.
    public var deferred = 0
    /// Pulled rows older than what this device held, whose newer version (item or delete)
    /// was pushed again (docs/sync.md, 5).
    public var repushed = 0
    /// Rollbacks of the store found and healed (docs/sync.md, 6).
    public var rollbacksHealed = 0
    /// Heads in the store that did not verify against this device's roster, at the last
    /// check: never trusted, so never remembered.
    public var headsRejected = 0
    /// What the last check of the store found; rolledBack until the heal has finished.
    public var store: SyncStoreState = .consistent
    /// Why the store was last found rolled back (kept after the heal, for status).
    public var lastRollback: String?

    public init() {}
}

/// One sync pass (docs/sync.md, 7.2), run by the SyncLoop on each wake-up: membership
/// refresh, push of the outbox, pull after the cursor, the inbox after an unlock, and
/// housekeeping on its interval. Every step reaches the local store through `store`, which
/// takes the store's lock for that step alone, so no PostgreSQL statement runs under it.
public final class SyncEngine<Store: SyncLocalStore & Sendable>: Sendable {
    /// The most outbox entries sealed for one push (the store splits them the same way).
    public static var pushLimit: Int { SyncDatabase.pushBatchLimit }
    /// The most rows one pull reads and one local transaction applies.
    public static var pullLimit: Int { 1000 }
    /// How long a tombstone stays in the store (section 5): a device offline longer than
    /// this misses the delete.
    public static var tombstoneLifetimeMs: Int64 { 60 * 24 * 3600 * 1000 }

    private struct Shared {
        var totals = SyncPassTotals()
        /// When housekeeping last ran (monotonic); nil before the first pass.
        var lastHousekeeping: ContinuousClock.Instant?
    }

    private let store: Store
    private let housekeepingInterval: Duration
    /// Milliseconds since 2001: what the local tombstones' window is measured with.
    private let clock: @Sendable () -> Int64
    private let shared = Mutex(Shared())

    public init(store: Store, housekeepingInterval: Duration = .seconds(3600),
                clock: (@Sendable () -> Int64)? = nil) {
        self.store = store
        self.housekeepingInterval = housekeepingInterval
        self.clock = clock ?? { SyncMembership.now() }
    }

    public var totals: SyncPassTotals { shared.withLock { $0.totals } }

    /// The pass (SyncLoop.Pass). A pending device refreshes only; a forked one stops at
    /// once with the reason; a circle that moved to another epoch ends the pass after what
    /// was pushed before it was found (the rows of the old epoch wait in the outbox).
    public func pass(_ database: SyncDatabase) throws(KeychainError) {
        switch try SyncMembership.refresh(store: store, database: database) {
        case .notInCircle:
            throw KeychainError(.notAvailable, "this keychain is in no sync circle")
        case .forked(let why):
            throw KeychainError(.decode, "sync is stopped: \(why)")
        case .removed:
            throw KeychainError(.notAvailable, "this device was removed from the sync circle: it syncs no more and keeps its items")
        case .verified, .becameMember, .newEpoch:
            // A new epoch reset the cursor in the same local transaction, so the pull below
            // reads the whole re-sealed epoch as a full reconcile.
            break
        }
        // Read afresh each pass: a rotation (slice 7) changes the epoch and resets the cursor.
        guard let member = try memberState() else { return }
        let healing = try checkStore(member, database)
        if let healing { try heal(member, database, healing) }
        try push(member, database)
        // What the pull found older than this device's versions goes back in the same pass,
        // before a device that never saw the newer one can take the old one.
        if try pull(member, database) > 0 { try push(member, database) }
        if healing != nil { try healEnded(member, database) }
        try applyInbox(member, database)
        try housekeep(member, database)
    }

    /// What the store shows against what this device remembers (docs/sync.md, 6): the circle's
    /// seq against the cursor, the roster's length against the verified one, and every head
    /// that verifies against the roster against the one remembered for its writer. Heads that
    /// do not verify are counted and left out. A consistent store raises the remembered heads;
    /// a rolled-back one is recorded locally until its heal ends. Returns the rollback to heal
    /// (found now, or found earlier and not yet healed), with the cursor it was found at.
    private func checkStore(_ member: Member, _ database: SyncDatabase) throws(KeychainError) -> Healing? {
        let local = try store.withReplica { (s) throws(KeychainError) in (try RollbackMemory(s).remembered(), try LocalCircle(s).roster()) }
        guard let remembered = local.0, let roster = local.1 else { throw KeychainError(.notAvailable, "this keychain is in no sync circle") }
        let found = try storeView(member, database, roster: roster)
        var state = found.epoch < member.key.epoch
            ? .rolledBack("the circle is at epoch \(found.epoch) in the store, below this device's \(member.key.epoch)")
            : SyncStoreState.check(store: found.view, remembered: remembered.view.keepingHeads(of: roster))
        var healing: Healing?
        switch state {
        case .consistent:
            if let pending = remembered.rollback {
                state = .rolledBack(pending)
                healing = Healing(reason: pending, cursor: remembered.view.seq)
            } else {
                try store.withReplica { (s) throws(KeychainError) in try RollbackMemory(s).rememberHeads(found.view.heads) }
            }
        case .rolledBack(let why):
            try store.withReplica { (s) throws(KeychainError) in try RollbackMemory(s).rollbackFound(why) }
            healing = Healing(reason: why, cursor: remembered.view.seq)
        case .partitioned:
            // Withheld entries are not a rollback: nothing here would bring them back.
            break
        }
        shared.withLock { s in
            s.totals.store = state
            s.totals.headsRejected = found.rejected
            if case .rolledBack(let why) = state { s.totals.lastRollback = why }
        }
        return healing
    }

    private struct Healing: Sendable {
        let reason: String
        /// The cursor when the rollback was found (0 once a heal restarted the pull).
        let cursor: Int64
    }

    /// The store's side of the check: its circle seq and epoch, roster length, and the heads
    /// that verify against `roster`. A removed member's head is passed over (it no longer
    /// verifies, and nothing is expected of it); any other head that does not verify counts as
    /// rejected.
    private func storeView(_ member: Member, _ database: SyncDatabase,
                           roster: SyncRoster) throws(KeychainError) -> (view: SyncStoreView, epoch: UInt32, rejected: Int) {
        let circleID = member.key.circleID
        guard let circle = try database.circleState(circleID: circleID) else {
            throw KeychainError(.itemNotFound, "the sync database holds no circle with this device's circle id")
        }
        var heads: [SyncDeviceID: SyncHeadPosition] = [:]
        var rejected = 0
        for head in try database.heads(circleID: circleID) {
            if roster.members[head.device] == nil, roster.entries.contains(where: { $0.entry.subject.id == head.device }) { continue }
            do throws(KeychainError) {
                heads[head.device] = try head.verify(roster: roster)
            } catch {
                rejected += 1
            }
        }
        let view = SyncStoreView(seq: circle.seq, rosterLength: try database.rosterLength(circleID: circleID), heads: heads)
        return (view, circle.epoch, rejected)
    }

    /// The first half of a heal: raise the circle's seq past the cursor the rollback was found
    /// at, append again the roster entries the store lost, push again every version this device holds that the store lacks (each keeping its
    /// writer, counter and mdat) with this device's head restored, and restart the pull from
    /// the first row. The push and full pull of the same pass follow; `healEnded` closes it.
    private func heal(_ member: Member, _ database: SyncDatabase, _ healing: Healing) throws(KeychainError) {
        let circleID = member.key.circleID
        guard try database.raiseSeq(circleID: circleID, epoch: member.key.epoch, atLeast: healing.cursor) else {
            throw KeychainError(.notAvailable, "the sync store was rolled back (\(healing.reason)) and its circle is at another epoch than this device's: it is not healed")
        }
        // Roster entries the store lost go back as signed: this device verified each, and the
        // refresh found the store's roster a prefix of them. Left out, every later check would
        // find the roster short again and heal again.
        if let verified = try store.withReplica({ (s) throws(KeychainError) in try LocalCircle(s).roster() }) {
            let held = try database.rosterLength(circleID: circleID)
            for signed in verified.entries.dropFirst(held) { try database.append(signed, wrapping: nil) }
        }
        let stored = try database.versions(circleID: circleID)
        let me = member.identity.id
        let (rows, roster, remembered) = try store.withReplica { (s) throws(KeychainError) in
            let rows = try StampedItems(s).healRows(circleKey: member.key, stored: stored)
            guard let roster = try LocalCircle(s).roster() else { throw KeychainError(.notAvailable, "this keychain is in no sync circle") }
            return (rows, roster, try RollbackMemory(s).remembered()?.view.heads[me]?.counter ?? 0)
        }
        let storeHead = try database.heads(circleID: circleID).first { $0.device == me }.flatMap { try? $0.verify(roster: roster) }
        let counter = ([remembered, storeHead?.counter ?? 0] + rows.filter { $0.version.writer == me }.map(\.version.counter)).max()!
        if !rows.isEmpty || counter > 0 {
            let head = SyncHead.signed(by: member.identity, counter: counter, roster: roster)
            if case .epochMoved(let current) = try database.push(circleID: circleID, epoch: member.key.epoch, rows: rows, head: head) {
                throw KeychainError(.notAvailable, "the circle moved to epoch \(current) during the heal of a rollback: it runs again at the next pass")
            }
            shared.withLock { $0.totals.pushed += rows.count }
        }
        try store.withReplica { (s) throws(KeychainError) in try RollbackMemory(s).restartPull() }
    }

    /// The heal's end, once the full pull reached the end: the store's verified heads are the
    /// new baseline and the rollback is cleared.
    private func healEnded(_ member: Member, _ database: SyncDatabase) throws(KeychainError) {
        guard let roster = try store.withReplica({ (s) throws(KeychainError) in try LocalCircle(s).roster() }) else { return }
        let found = try storeView(member, database, roster: roster)
        try store.withReplica { (s) throws(KeychainError) in try RollbackMemory(s).healed(heads: found.view.heads) }
        shared.withLock { s in
            s.totals.rollbacksHealed += 1
            s.totals.store = .consistent
        }
    }

    /// What a member's pass needs from the store; nil while this device is pending.
    private struct Member: Sendable {
        let identity: SyncDeviceIdentity
        let key: SyncCircleKey
    }

    private func memberState() throws(KeychainError) -> Member? {
        try store.withReplica { (s) throws(KeychainError) -> Member? in
            guard let circle = try LocalCircle(s).row(), circle.state == SyncCircleState.member else { return nil }
            guard let identity = try LocalCircle(s).identity() else {
                throw KeychainError(.decode, "this keychain is in a sync circle but has no sync identity: its state was altered")
            }
            guard let key = try LocalCircle(s).circleKey(epoch: circle.epoch) else {
                throw KeychainError(.notAvailable, "this device holds no circle key for epoch \(circle.epoch) yet")
            }
            return Member(identity: identity, key: key)
        }
    }

    /// Pushes the outbox in batches until it gives nothing more. Each batch is sealed (and
    /// numbered) under the lock, sent without it, and removed from the outbox under it once
    /// the store committed it: a pass cut short anywhere resends the same versions.
    private func push(_ member: Member, _ database: SyncDatabase) throws(KeychainError) {
        let writer = member.identity.id
        while true {
            let batch = try store.withReplica { (s) throws(KeychainError) -> Outgoing? in
                let records = try OutboxPush(s).outgoing(circleKey: member.key, writer: writer, limit: Self.pushLimit)
                guard let last = records.map(\.row.version.counter).max() else { return nil }
                guard let roster = try LocalCircle(s).roster() else { throw KeychainError(.notAvailable, "this keychain is in no sync circle") }
                return Outgoing(records: records, head: SyncHead.signed(by: member.identity, counter: last, roster: roster))
            }
            guard let batch else { return }
            switch try database.push(circleID: member.key.circleID, epoch: member.key.epoch,
                                     rows: batch.records.map(\.row), head: batch.head) {
            case .epochMoved(let current):
                throw KeychainError(.notAvailable, "the circle moved to epoch \(current) (this device is at \(member.key.epoch)): its changes wait until it holds the new key")
            case .pushed:
                // A lost record (the store holds a later version) needs nothing here: the pull
                // that follows brings the winner.
                // This device's own head is known good once committed: a store later showing
                // a lower one lost these writes, even if no pass checked in between.
                let position = SyncHeadPosition(counter: batch.head.counter, rosterLength: Int(batch.head.rosterLength))
                try store.withReplica { (s) throws(KeychainError) in
                    try OutboxPush(s).pushed(batch.records)
                    try RollbackMemory(s).rememberHeads([writer: position])
                }
                shared.withLock { $0.totals.pushed += batch.records.count }
            }
        }
    }

    private struct Outgoing: Sendable {
        let records: [SyncOutgoingRecord]
        let head: SyncHead
    }

    /// Pulls after the cursor in batches, each applied with its cursor in one local
    /// transaction, until the store has no more. Until a pull from the start has once
    /// reached the end, every row is read as part of a full pull (older counters of a writer
    /// legitimately appear), and replays are told only after it.
    /// Returns how many rows were older than what this device holds (their newer versions
    /// are queued again).
    private func pull(_ member: Member, _ database: SyncDatabase) throws(KeychainError) -> Int {
        guard let circle = try store.withReplica({ (s) throws(KeychainError) in try LocalCircle(s).row() }) else { return 0 }
        // A last full pull older than the tombstones' life may have missed deletes whose
        // tombstones expired since: the cursor is not trusted, and every row is read again.
        let stale = circle.lastFullPull.map { SyncMembership.now() - $0 > Self.tombstoneLifetimeMs } ?? false
        let mode: SyncPullMode = circle.cursor == 0 || circle.lastFullPull == nil || stale ? .everyRow : .afterCursor
        // A full pull starts from the first row even when an earlier one was cut short: the
        // reconcile at its end needs every record id, and re-reading applies nothing twice.
        var cursor = mode == .everyRow ? 0 : circle.cursor
        // Every record id a full pull sees, applied or not, and whether one was unreadable
        // (then no local item can be known to be gone).
        var present = Set<[UInt8]>()
        var sawMalformed = false
        var repushed = 0
        while true {
            let batch = try database.pull(circleID: member.key.circleID, after: cursor, limit: Self.pullLimit)
            if mode == .everyRow {
                for row in batch.rows { present.insert(row.recordID) }
                if batch.malformed > 0 { sawMalformed = true }
            }
            let report = try store.withReplica { (s) throws(KeychainError) in
                try PulledRows(s).apply(batch.rows, circleKey: member.key, writer: member.identity.id, mode: mode, cursor: batch.lastSeq)
            }
            shared.withLock { s in
                s.totals.pulled += batch.rows.count + batch.malformed
                s.totals.applied += report.applied
                s.totals.rejected += report.rejected + batch.malformed
                s.totals.deferred += report.deferred
                s.totals.repushed += report.repushed
            }
            repushed += report.repushed
            cursor = batch.lastSeq
            if batch.reachedEnd { break }
        }
        if mode == .everyRow {
            let deleted = try store.withReplica { (s) throws(KeychainError) -> Int in
                let deleted = sawMalformed ? 0 : try StampedItems(s).reconcile(present: present, circleKey: member.key)
                try LocalCircle(s).fullPullEnded(at: SyncMembership.now())
                return deleted
            }
            shared.withLock { $0.totals.applied += deleted }
        }
        return repushed
    }

    /// Rows that waited for their class key, once it is loaded (`PulledRows.applyInbox` commits
    /// nothing while every one still waits).
    private func applyInbox(_ member: Member, _ database: SyncDatabase) throws(KeychainError) {
        let report = try store.withReplica { (s) throws(KeychainError) -> SyncApplyReport in
            guard try PulledRows(s).inboxCount() > 0 else { return SyncApplyReport() }
            return try PulledRows(s).applyInbox(circleKey: member.key, writer: member.identity.id)
        }
        shared.withLock { s in
            s.totals.applied += report.applied
            s.totals.rejected += report.rejected
            s.totals.repushed += report.repushed
        }
        if report.repushed > 0 { try push(member, database) }
    }

    /// Expires the circle's old tombstones in the store, and this device's kept deletes past
    /// their window, at most once per `housekeepingInterval`.
    private func housekeep(_ member: Member, _ database: SyncDatabase) throws(KeychainError) {
        let now = ContinuousClock.now
        let due = shared.withLock { s in
            guard let last = s.lastHousekeeping else { return true }
            return now - last >= housekeepingInterval
        }
        guard due else { return }
        _ = try store.withReplica { (s) throws(KeychainError) in
            try LocalTombstones(s).sweep(now: clock(), epoch: member.key.epoch)
        }
        _ = try database.expireTombstones(circleID: member.key.circleID, olderThan: SyncMembership.now() - Self.tombstoneLifetimeMs)
        shared.withLock { $0.lastHousekeeping = now }
    }
}

extension SyncStoreView {
    /// The remembered view without heads of devices no longer members: a removed device's
    /// head stops verifying, which is not a rollback.
    func keepingHeads(of roster: SyncRoster) -> SyncStoreView {
        SyncStoreView(seq: seq, rosterLength: rosterLength, heads: heads.filter { roster.members[$0.key] != nil })
    }
}
