import KeychainModel
import KeychainStorage

/// The outbox of one store, the replica port's changes to send (docs/sync.md, 7.3): every
/// local change to a synchronizable item (sync = 1) queues its entry in the transaction that
/// makes the change, so no change can be committed without its entry, nor an entry without
/// its change. The replicator (ItemReplica) reads and empties it. Each function starts with
/// the one branch a sync = 0 item costs. Called inside the writing call's transaction, by the
/// store's one owner, as for every type over the store.
struct Outbox {
    let store: ItemStore

    var table: OutboxTable { OutboxTable(store.database) }

    /// After `row` was inserted (an add, a restored item).
    func queue(inserted row: ItemRow) throws(KeychainError) {
        guard row.sync != 0, Self.mayLeaveTheDevice(row) else { return }
        try queueVersion(item: row.rowid)
    }

    /// After `old` was replaced by `new` (same rowid). A change of primary key or of sync
    /// gives the item another record: the one the circle knew gets its tombstone.
    func queue(replaced old: ItemRow, with new: ItemRow) throws(KeychainError) {
        guard old.sync != 0 || new.sync != 0 else { return }
        if old.sync != 0 && !Self.sameRecord(old, new) {
            if old.replicaStamp != nil {
                try queueTombstone(for: old)
                try store.table.clearStamp(rowid: old.rowid)
            }
            if new.sync == 0 { try table.dequeueVersion(item: old.rowid) }
        }
        if new.sync != 0, Self.mayLeaveTheDevice(new) { try queueVersion(item: new.rowid) }
    }

    /// Before `row` is deleted. Only a record the circle has seen needs a tombstone; an item
    /// never synced leaves nothing behind (its pending version goes with it), so a keychain
    /// outside any circle keeps no deleted item's blob.
    func queue(deleting row: ItemRow) throws(KeychainError) {
        guard row.sync != 0, row.replicaStamp != nil else { return }
        try queueTombstone(for: row)
    }

    /// Before every row `filter` selects is deleted by one statement: the synced ones among
    /// them get their tombstones. Nothing to read when the filter holds sync = 0 only.
    func queue(deletingRowsOf filter: RowFilter) throws(KeychainError) {
        guard filter.sync != 0 else { return }
        var synced = filter
        synced.sync = 1
        var stamped: [ItemRow] = []
        try store.table.forEach(synced) { row in
            if row.replicaStamp != nil { stamped.append(row) }
            return true
        }
        for row in stamped { try queueTombstone(for: row) }
    }

    /// Queues item `rowid`'s current version, counted for the daemon's wake-up of the
    /// replicator (ItemStore.outboxQueuedChanges).
    func queueVersion(item rowid: Int64) throws(KeychainError) {
        try table.queueVersion(item: rowid)
        store.outboxQueuedChanges &+= 1
    }

    private func queueTombstone(for row: ItemRow) throws(KeychainError) {
        guard Self.mayLeaveTheDevice(row), let pdmn = row.protection else { return }
        // The delete is a new version of the record: never before the version it removes,
        // whether that is the stamped one or a later local change.
        let previous = max(Self.milliseconds(row.modified), row.replicaStamp?.mdat ?? .min)
        let mdat = SyncVersion.stampedMdat(now: Self.milliseconds(store.now()), previous: previous)
        try table.queueTombstone(OutboxTombstone(itemClass: row.itemClass, protection: pdmn,
                                                   identity: store.codec.identity(of: row), blob: row.blob, mdat: mdat))
        store.outboxQueuedChanges &+= 1
    }

    /// Never a ThisDeviceOnly row, even one edited to say sync = 1 (adds and updates refuse
    /// the pair), nor one whose protection class is unknown.
    private static func mayLeaveTheDevice(_ row: ItemRow) -> Bool {
        guard let pdmn = row.protection else { return false }
        return !pdmn.isThisDeviceOnly
    }

    /// Whether two rows are the same replicated record: same class, access group, sync and
    /// primary-key columns (the record id hashes exactly these, docs/sync.md 2.2).
    static func sameRecord(_ a: ItemRow, _ b: ItemRow) -> Bool {
        guard a.itemClass == b.itemClass, a.accessGroup == b.accessGroup, a.sync == b.sync else { return false }
        return ClassSchema.of(a.itemClass)!.primaryKey.allSatisfy { a.hashes[$0.code] == b.hashes[$0.code] }
    }

    /// CFAbsoluteTime as a version's milliseconds since 2001, rounded down (a date before 2001 or
    /// beyond Int64 is clamped, never a trap).
    static func milliseconds(_ seconds: Double) -> Int64 {
        let ms = (seconds * 1000).rounded(.down)
        guard ms.isFinite else { return ms > 0 ? .max : .min }
        return ms >= 9.2e18 ? .max : ms <= -9.2e18 ? .min : Int64(ms)
    }
}
