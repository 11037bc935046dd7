import KeychainModel
import KeychainStorage

/// The upgrade of one store's rows written before schema version 4, which hashed a number in
/// a blob attribute (acct 42) as its decimal text, the same as the string "42". Such a row is
/// resealed with the current hashes (nothing else about it changes: same rowid, persistent
/// reference, dates, secret) as soon as its class key is loaded, which needs no passcode
/// for the Always classes and for a keychain without passcode, and the first unlock for the
/// others. Called by the store's one owner, as for every type over the store.
struct LegacyNumbers {
    let store: ItemStore

    /// Rehashes the rows of every listed protection class whose key is loaded, one class per
    /// transaction. A class without rows left (akpu items deleted with the passcode, or a pdmn
    /// that only an altered row had) is done without its key.
    func rehash() throws(KeychainError) {
        let pendingTable = NumberRehashTable(store.database)
        let pending = try pendingTable.pending()
        guard !pending.isEmpty else { return }
        let counts = try store.table.countByProtection()
        for text in pending {
            guard let pdmn = Protection(rawValue: text), (counts[text] ?? 0) > 0 else {
                try store.database.transaction { () throws(KeychainError) in try pendingTable.markDone(text) }
                continue
            }
            guard let key = store.keybag.key(for: pdmn) else { continue }
            try store.database.transaction { () throws(KeychainError) in
                var resealed: [ItemRow] = []
                for cls in ItemClass.stored {
                    try store.table.forEachRow(of: cls, protection: pdmn) { (row) throws(KeychainError) -> Bool in
                        let item: StoredItem
                        do throws(KeychainError) {
                            item = try store.codec.open(row, classKey: key, withAttributes: true)
                        } catch where error.status == .decode {
                            return true  // an altered row opens for nobody; it stays as it is
                        }
                        guard ItemCodec.hasBlobNumber(item.attributes, among: ClassSchema.of(cls)!.columnAttributes) else { return true }
                        resealed.append(store.codec.seal(cls, attributes: item.attributes, data: item.data,
                                                         persistentID: row.persistentID, classKey: key, rowid: row.rowid))
                        return true
                    }
                }
                for row in resealed { try store.table.replace(row) }
                try pendingTable.markDone(text)
            }
        }
    }

    /// While a locked class still waits for its rehash, one of its rows may hold `row`'s
    /// primary key under the old hash of a number, a duplicate the unique index cannot see.
    /// Such a holder cannot be opened to tell a number from a string with the same text, so
    /// the write waits for the unlock that finishes the upgrade: errSecInteractionNotAllowed.
    func checkNoHolder(of row: ItemRow, attributes: AttributeDictionary) throws(KeychainError) {
        let cls = row.itemClass
        guard ItemCodec.hasBlobNumber(attributes, among: ClassSchema.of(cls)!.primaryKey) else { return }
        let pending = try NumberRehashTable(store.database).pending()
        guard !pending.isEmpty else { return }
        var legacy = row
        legacy.hashes = store.codec.hashes(of: cls, attributes, legacy: true)
        // A holder whose class is upgraded has a string or data in that column, not a number.
        guard let holder = try store.table.primaryKeyHolder(of: legacy), let pdmn = holder.protection,
              pending.contains(pdmn.rawValue) else { return }
        throw KeychainError(.interactionNotAllowed, "an item of a locked class (\(pdmn.name)) may hold the same primary key: unlock the keychain once so that keychaind can finish upgrading its items, then try again")
    }
}
