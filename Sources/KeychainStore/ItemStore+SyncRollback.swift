import KeychainCrypto
import KeychainModel
import KeychainStorage

/// The local half of rollback detection and healing (docs/sync.md, 6): what this device
/// remembers of the store, and the rows it pushes again when the store went back.
extension ItemStore {
    /// What this device has seen of the store: its cursor, the roster length it verified, and
    /// the heads it remembers; and the reason of a rollback whose heal has not finished.
    public func syncRemembered() throws(KeychainError) -> (view: SyncStoreView, rollback: String?)? {
        guard let circle = try SyncCircleTable(database).row(), let roster = try syncRoster() else { return nil }
        let view = SyncStoreView(seq: circle.cursor, rosterLength: roster.length, heads: try SyncHeadsSeenTable(database).heads())
        return (view, circle.rollback)
    }

    /// Remembers `heads`, verified in a consistent store or pushed by this device: a writer's
    /// remembered head only rises. Commits nothing when none would rise (each transaction
    /// moves the generation).
    public func syncRememberHeads(_ heads: [SyncDeviceID: SyncHeadPosition]) throws(KeychainError) {
        let table = SyncHeadsSeenTable(database)
        let known = try table.heads()
        let rising = heads.filter { writer, head in
            guard let seen = known[writer] else { return true }
            return head.counter > seen.counter || head.rosterLength > seen.rosterLength
        }
        guard !rising.isEmpty else { return }
        try database.transaction { () throws(KeychainError) in try table.raise(rising) }
    }

    /// Records that the store was found rolled back: kept until `syncHealed`, so a heal cut
    /// short is taken up again even once the store looks consistent.
    public func syncRollbackFound(_ reason: String) throws(KeychainError) {
        guard try SyncCircleTable(database).row()?.rollback != reason else { return }
        try database.transaction { () throws(KeychainError) in try SyncCircleTable(database).setRollback(reason) }
    }

    /// After the re-push: the next pull reads every row again, as a full pull (the per-writer
    /// replay rule is off for it, since old counters legitimately reappear after a restore).
    public func syncRestartPull() throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in try SyncCircleTable(database).restartPull() }
    }

    /// The heal ended (re-pushed, pulled every row): the store's verified heads are the new
    /// baseline, lower ones included, and the rollback is cleared.
    public func syncHealed(heads: [SyncDeviceID: SyncHeadPosition]) throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in
            try SyncHeadsSeenTable(database).replace(with: heads)
            try SyncCircleTable(database).setRollback(nil)
        }
    }

    /// The rows a heal pushes again: every synced item the circle has seen (a stamp) whose
    /// stamped version is newer than the store's row of its record, or whose row is gone,
    /// sealed under `circleKey` with that same version (writer, counter and mdat), so the
    /// conflict order on every device stays what it was. In counter order, so each writer's
    /// counters rise with seq as pushes usually do. Items with a pending change are left to
    /// the push that follows (it numbers them anew). errSecInteractionNotAllowed while a class
    /// holding such items is locked: a heal that skipped them would let the full pull after it
    /// delete them as gone from the store.
    public func syncHealRows(circleKey: SyncCircleKey, stored: [[UInt8]: SyncVersion]) throws(KeychainError) -> [SyncRecordRow] {
        try checkCircle(circleKey)
        var out: [SyncRecordRow] = []
        for cls in ItemClass.stored {
            for pdmn in Protection.allCases where !pdmn.isThisDeviceOnly {
                let candidates = try stampedSyncedRows(of: cls, protection: pdmn)
                guard !candidates.isEmpty else { continue }
                guard let key = keybag.key(for: pdmn) else {
                    throw KeychainError(.interactionNotAllowed, "the sync store was rolled back and its heal waits for the unlock of this device's \(pdmn.rawValue) items")
                }
                for row in candidates {
                    guard try syncOutbox.entry(item: row.rowid) == nil, let stamp = row.syncStamp,
                          let writer = try? SyncDeviceID(stamp.writer),
                          let item = try? codec.open(row, classKey: key, withAttributes: true) else { continue }
                    let version = SyncVersion(mdat: stampMdat(stamp, row), writer: writer, counter: stamp.counter)
                    if let theirs = stored[try circleKey.recordID(of: cls, attributes: item.attributes)], theirs >= version { continue }
                    var attributes = item.attributes
                    attributes["v_Data"] = .data(item.data)
                    let (header, body) = try SyncRecordSealer.seal(cls, pdmn, attributes, version: version, circleKey: circleKey)
                    out.append(SyncRecordRow(recordID: header.recordID, epoch: header.epoch, version: version, tombstone: false, body: body))
                }
            }
        }
        return out.sorted { ($0.version.counter, $0.version.writer) < ($1.version.counter, $1.version.writer) }
    }
}
