import KeychainCrypto
import KeychainModel
import KeychainStorage

/// The rows a lookup selected, each with the class key that opens it.
public struct FetchedRows: Sendable {
    let rows: [(row: ItemRow, key: SecureKey)]
    let corrupt: Int
    /// The last rowid read, where the next page starts.
    public let lastRowID: Int64
    /// No row after these (for a page: the search is over).
    public let exhausted: Bool
    /// The store's time at the lookup: an item expired by then is not returned, so a long
    /// list judges each page by the time it was read.
    let readAt: Double
}

/// The store's rows with the class keys that open them, read under exclusive access (the
/// daemon's store lock) and opened elsewhere: the one part of a read, and of a key call, that
/// needs the lock (`SplitReader` does the rest on the caller's thread). A row of a class whose
/// key is not loaded fails the whole lookup (errSecInteractionNotAllowed, as on iOS).
public struct SealedRows {
    let store: ItemStore

    /// Rows and sealed bytes a page stops at (an answer frame holds about as much).
    static let pageRows = 256
    public static let pageBytes = 1 << 20

    /// Every row the selection names.
    func all(_ selection: ItemTable.Selection) throws(KeychainError) -> FetchedRows {
        try read(selection, maxBytes: nil)
    }

    /// Rows of one page: at most `pageRows`, and no more once their sealed bytes reach
    /// `pageBytes`. Memory per page is so bounded whatever the answer.
    func page(_ selection: ItemTable.Selection) throws(KeychainError) -> FetchedRows {
        try read(selection, maxBytes: Self.pageBytes)
    }

    /// The row a persistent reference names, when one of `groups` holds it: one indexed read,
    /// the whole of a key call under the lock.
    func named(_ ref: PersistentRef, groups: [String]) throws(KeychainError) -> FetchedRows {
        var rows: [(row: ItemRow, key: SecureKey)] = []
        var corrupt = 0
        let row = try store.table.row(persistentID: ref.id, of: ref.itemClass, groups: groups)
        if let row {
            if let pdmn = row.protection { rows.append((row, try store.classKey(pdmn))) } else { corrupt = 1 }
        }
        return FetchedRows(rows: rows, corrupt: corrupt, lastRowID: row?.rowid ?? 0, exhausted: true, readAt: store.now())
    }

    private func read(_ selection: ItemTable.Selection, maxBytes: Int?) throws(KeychainError) -> FetchedRows {
        var rows: [(row: ItemRow, key: SecureKey)] = []
        var corrupt = 0
        var bytes = 0
        var last: Int64 = 0
        var read = 0
        var cut = false
        try store.table.forEach(selection) { (row) throws(KeychainError) -> Bool in
            read += 1
            last = row.rowid
            guard let pdmn = row.protection else {
                corrupt += 1
                return true
            }
            rows.append((row, try store.classKey(pdmn)))
            bytes += row.blob.count
            if let maxBytes, bytes >= maxBytes {
                cut = true
                return false
            }
            return true
        }
        let exhausted = !cut && (maxBytes == nil || read < Self.pageRows)
        return FetchedRows(rows: rows, corrupt: corrupt, lastRowID: last, exhausted: exhausted, readAt: store.now())
    }
}
