import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// The synced items a circle has seen (a stamp), taken as a whole: the last step of a full
/// pull, the rows a heal pushes again, and a leave (docs/sync.md, 3, 5 and 6).
public struct StampedItems {
    let replica: ItemReplica

    public init(_ replica: ItemReplica) { self.replica = replica }

    /// The last step of a full pull (docs/sync.md, 5): after reading every row of the circle's
    /// epoch, a synced item whose record the store no longer has was deleted elsewhere while
    /// its tombstone could not reach this device (expired after 60 days, or not carried into a
    /// new epoch by a rotation), so it goes here too. Deletes the synced items that the
    /// circle has seen, that have not changed here since (no pending version), and whose
    /// record id is not in `present`: every record id of the full pull, applied or not. Items
    /// of a locked class are left for the next full pull (their record id needs their
    /// attributes). Queues no tombstone: the circle has none of these records already.
    /// Returns how many went.
    public func reconcile(present: Set<[UInt8]>, circleKey: SyncCircleKey) throws(KeychainError) -> Int {
        try replica.database.transaction { () throws(KeychainError) -> Int in
            guard let circle = try SyncCircleTable(replica.database).row(), circle.circleID == circleKey.circleID.bytes,
                  circle.epoch == circleKey.epoch else {
                throw KeychainError(.notAvailable, "the sync circle changed during the full pull: it runs again at the next pass")
            }
            var gone: [Int64] = []
            for cls in ItemClass.stored {
                for pdmn in Protection.allCases where !pdmn.isThisDeviceOnly {
                    guard let key = replica.classKey(pdmn) else { continue }
                    for row in try rows(of: cls, protection: pdmn) {
                        guard try replica.outbox.entry(item: row.rowid) == nil,
                              let item = try? replica.open(row, classKey: key) else { continue }
                        if !present.contains(try circleKey.recordID(of: cls, attributes: item.attributes)) {
                            gone.append(row.rowid)
                        }
                    }
                }
            }
            for rowid in gone { try replica.delete(rowid: rowid) }
            return gone.count
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
    public func healRows(circleKey: SyncCircleKey, stored: [[UInt8]: SyncVersion]) throws(KeychainError) -> [SyncRecordRow] {
        try LocalCircle(replica).check(circleKey)
        var out: [SyncRecordRow] = []
        for cls in ItemClass.stored {
            for pdmn in Protection.allCases where !pdmn.isThisDeviceOnly {
                let candidates = try rows(of: cls, protection: pdmn)
                guard !candidates.isEmpty else { continue }
                guard let key = replica.classKey(pdmn) else {
                    throw KeychainError(.interactionNotAllowed, "the sync store was rolled back and its heal waits for the unlock of this device's \(pdmn.rawValue) items")
                }
                for row in candidates {
                    guard try replica.outbox.entry(item: row.rowid) == nil, let stamp = row.replicaStamp,
                          let writer = try? SyncDeviceID(stamp.writer),
                          let item = try? replica.open(row, classKey: key) else { continue }
                    let version = SyncVersion(mdat: LocalVersion.stampMdat(stamp, row), writer: writer, counter: stamp.counter)
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

    /// On leaving a circle (inside the caller's transaction): every synced item becomes one no
    /// circle has seen (no stamp) with its push queued, as if added outside any circle. Kept
    /// stamped, the first full pull of the next circle would find their records absent and
    /// delete them as deleted elsewhere (docs/sync.md, 5), and a heal there would push them
    /// with the old circle's writers.
    func unstampAll() throws(KeychainError) {
        for cls in ItemClass.stored {
            for pdmn in Protection.allCases where !pdmn.isThisDeviceOnly {
                for row in try rows(of: cls, protection: pdmn) {
                    try replica.clearStamp(rowid: row.rowid)
                    try replica.queueVersion(item: row.rowid)
                }
            }
        }
    }

    /// The synced items of one class and protection class that a circle has seen (stamped).
    private func rows(of cls: ItemClass, protection pdmn: Protection) throws(KeychainError) -> [ItemRow] {
        var rows: [ItemRow] = []
        try replica.forEachRow(of: cls, protection: pdmn) { row in
            if row.sync == 1, row.replicaStamp != nil { rows.append(row) }
            return true
        }
        return rows
    }
}
