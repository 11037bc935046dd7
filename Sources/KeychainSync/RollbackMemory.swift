import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// The local half of rollback detection (docs/sync.md, 6): what this device remembers of the
/// store, and the reason of a rollback whose heal has not finished.
public struct RollbackMemory {
    let replica: ItemReplica

    public init(_ replica: ItemReplica) { self.replica = replica }

    private var database: SQLiteDatabase { replica.database }

    /// What this device has seen of the store: its cursor, the roster length it verified, and
    /// the heads it remembers; and the reason of a rollback whose heal has not finished.
    public func remembered() throws(KeychainError) -> (view: SyncStoreView, rollback: String?)? {
        guard let circle = try SyncCircleTable(database).row(), let roster = try LocalCircle(replica).roster() else { return nil }
        let view = SyncStoreView(seq: circle.cursor, rosterLength: roster.length, heads: try SyncHeadsSeenTable(database).heads())
        return (view, circle.rollback)
    }

    /// Remembers `heads`, verified in a consistent store or pushed by this device: a writer's
    /// remembered head only rises. Commits nothing when none would rise (each transaction
    /// moves the generation).
    public func rememberHeads(_ heads: [SyncDeviceID: SyncHeadPosition]) throws(KeychainError) {
        let table = SyncHeadsSeenTable(database)
        let known = try table.heads()
        let rising = heads.filter { writer, head in
            guard let seen = known[writer] else { return true }
            return head.counter > seen.counter || head.rosterLength > seen.rosterLength
        }
        guard !rising.isEmpty else { return }
        try database.transaction { () throws(KeychainError) in try table.raise(rising) }
    }

    /// Records that the store was found rolled back: kept until `healed`, so a heal cut
    /// short is taken up again even once the store looks consistent.
    public func rollbackFound(_ reason: String) throws(KeychainError) {
        guard try SyncCircleTable(database).row()?.rollback != reason else { return }
        try database.transaction { () throws(KeychainError) in try SyncCircleTable(database).setRollback(reason) }
    }

    /// After the re-push: the next pull reads every row again, as a full pull (the per-writer
    /// replay rule is off for it, since old counters legitimately reappear after a restore).
    public func restartPull() throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in try SyncCircleTable(database).restartPull() }
    }

    /// The heal ended (re-pushed, pulled every row): the store's verified heads are the new
    /// baseline, lower ones included, and the rollback is cleared.
    public func healed(heads: [SyncDeviceID: SyncHeadPosition]) throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in
            try SyncHeadsSeenTable(database).replace(with: heads)
            try SyncCircleTable(database).setRollback(nil)
        }
    }
}
