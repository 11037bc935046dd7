import KeychainCrypto
import KeychainModel
import KeychainStorage

/// The last step of a full pull (docs/sync.md, 5): after reading every row of the circle's
/// epoch, a synced item whose record the store no longer has was deleted elsewhere while
/// its tombstone could not reach this device (expired after 60 days, or not carried into a
/// new epoch by a rotation), so it goes here too.
extension ItemStore {
    /// Deletes the synced items that the circle has seen (a stamp), that have not changed here
    /// since (no pending version), and whose record id is not in `present`: every record id of
    /// the full pull, applied or not. Items of a locked class are left for the next full pull
    /// (their record id needs their attributes). Queues no tombstone: the circle has none of
    /// these records already. Returns how many went.
    public func syncReconcile(present: Set<[UInt8]>, circleKey: SyncCircleKey) throws(KeychainError) -> Int {
        try database.transaction { () throws(KeychainError) -> Int in
            guard let circle = try SyncCircleTable(database).row(), circle.circleID == circleKey.circleID.bytes,
                  circle.epoch == circleKey.epoch else {
                throw KeychainError(.notAvailable, "the sync circle changed during the full pull: it runs again at the next pass")
            }
            var gone: [Int64] = []
            for cls in ItemClass.stored {
                for pdmn in Protection.allCases where !pdmn.isThisDeviceOnly {
                    guard let key = keybag.key(for: pdmn) else { continue }
                    for row in try stampedSyncedRows(of: cls, protection: pdmn) {
                        guard try syncOutbox.entry(item: row.rowid) == nil,
                              let item = try? codec.open(row, classKey: key, withAttributes: true) else { continue }
                        if !present.contains(try circleKey.recordID(of: cls, attributes: item.attributes)) {
                            gone.append(row.rowid)
                        }
                    }
                }
            }
            for rowid in gone { try table.delete(rowid: rowid) }
            return gone.count
        }
    }

    /// The synced items of one class and protection class that a circle has seen (stamped):
    /// what a full reconcile, a heal and a leave go through.
    func stampedSyncedRows(of cls: ItemClass, protection pdmn: Protection) throws(KeychainError) -> [ItemRow] {
        var rows: [ItemRow] = []
        try table.forEachRow(of: cls, protection: pdmn) { row in
            if row.sync == 1, row.syncStamp != nil { rows.append(row) }
            return true
        }
        return rows
    }
}
