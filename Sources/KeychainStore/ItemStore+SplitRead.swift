import KeychainCrypto
import KeychainModel
import KeychainStorage

/// A CopyMatching split in three, so that a server serialising access to the store holds its
/// lock only for the middle part (the SQL lookup): parsing and planning before, decryption
/// and shaping the result after, run concurrently. The outer two run on a `SplitReader`, a
/// Sendable value holding only what never changes after init (the item codec with its
/// lookup-hash key); `fetch` needs the same exclusive access to the store as every other call.
public struct PreparedSearch: Sendable {
    let query: ItemQuery
    let plan: SearchPlan
    /// The rows were cut off by SQL LIMIT: if some of them turn out to be altered, there may be
    /// more matches beyond the cut, and the full path must run instead.
    let limitedInSQL: Bool
    /// The plan's filter as SQL, built before the lock is taken.
    let selection: ItemTable.Selection
}

/// The rows a prepared search selected, each with the class key that opens it.
public struct FetchedRows: Sendable {
    let rows: [(row: ItemRow, key: SecureKey)]
    let corrupt: Int
    /// The last rowid read, where the next page starts.
    public let lastRowID: Int64
    /// No row after these (for a page: the search is over).
    public let exhausted: Bool
}

/// One page of a long answer: its results, how many rows were altered, and where the search
/// goes on (nil: it is over).
public struct SearchPage: Sendable {
    public let results: [ItemResult]
    /// Items that matched (there are no results when the query asks for nothing back).
    public let matched: Int
    public let corrupt: Int
    public let next: Int64?
}

/// The parts of a split read that run outside the store's lock, on any thread.
public struct SplitReader: Sendable {
    let codec: ItemCodec

    /// Parses and plans a CopyMatching. nil when the query needs the general path
    /// (identities, which join two classes).
    public func prepareSearch(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> PreparedSearch? {
        let query = try ItemQuery(dict, for: .copyMatching)
        guard query.itemClass != .identity else { return nil }
        if query.returnRef && query.itemClass != .genericPassword && query.itemClass != .internetPassword {
            throw KeychainError(.unimplemented, "r_Ref: object references do not cross the socket; ask for r_Data or r_Attributes")
        }
        let groups = try scope.groups(naming: query.accessGroup)
        var plan = ItemStore.plan(query.itemClass, attributes: query.attributes, groups: groups, query: query, codec: codec)
        let limited = plan.checks.isEmpty && query.limit.maxRows != nil
        if limited { plan.filter.limit = query.limit.maxRows }
        return PreparedSearch(query: query, plan: plan, limitedInSQL: limited, selection: ItemTable.selection(plan.filter))
    }

    /// Whether a search returns a list, which may be long: such answers go in pages.
    public func answersInPages(_ prepared: PreparedSearch) -> Bool { !prepared.query.limit.returnsSingle }

    /// How many matches the search asks for at most (nil: all).
    public func wantedMatches(_ prepared: PreparedSearch) -> Int? { prepared.query.limit.maxRows }

    /// The selection of the page after `rowid` (built before taking the lock).
    public func pageSelection(_ prepared: PreparedSearch, after rowid: Int64) -> ItemTable.Selection {
        var filter = prepared.plan.filter
        filter.afterRowID = rowid
        filter.limit = ItemStore.pageRows
        return ItemTable.selection(filter)
    }

    /// Opens, matches and shapes one page, taking at most `wanted` matches.
    public func finishPage(_ prepared: PreparedSearch, _ fetched: FetchedRows, wanted: Int?) throws(KeychainError) -> SearchPage {
        let query = prepared.query
        let decode = query.returnAttributes || prepared.plan.needsOpening || ItemStore.needsKeyAttributes(query)
        var items: [StoredItem] = []
        var corrupt = fetched.corrupt
        for (row, key) in fetched.rows {
            if let wanted, items.count >= wanted { break }
            do throws(KeychainError) {
                let item = try codec.open(row, classKey: key, withAttributes: decode)
                if prepared.plan.matches(item) { items.append(item) }
            } catch where error.status == .decode {
                corrupt += 1
            }
        }
        let done = fetched.exhausted || wanted.map { items.count >= $0 } ?? false
        var results: [ItemResult] = []
        if !items.isEmpty, case .list(let shaped) = try ItemStore.result(for: items, query: query, single: false) { results = shaped }
        return SearchPage(results: results, matched: items.count, corrupt: corrupt, next: done ? nil : fetched.lastRowID)
    }

    /// Opens, matches and shapes the result. nil when altered rows inside a SQL
    /// limit leave the answer incomplete: run `copyMatching` instead.
    public func finish(_ prepared: PreparedSearch, _ fetched: FetchedRows) throws(KeychainError) -> QueryResult? {
        let query = prepared.query
        let decode = query.returnAttributes || prepared.plan.needsOpening || ItemStore.needsKeyAttributes(query)
        var items: [StoredItem] = []
        var corrupt = fetched.corrupt
        let limit = query.limit.maxRows
        for (row, key) in fetched.rows {
            if let limit, items.count >= limit { break }
            let item: StoredItem
            do throws(KeychainError) {
                item = try codec.open(row, classKey: key, withAttributes: decode)
            } catch where error.status == .decode {
                corrupt += 1
                continue
            }
            if prepared.plan.matches(item) { items.append(item) }
        }
        if prepared.limitedInSQL && corrupt > 0 && items.count < (limit ?? Int.max) { return nil }
        guard !items.isEmpty else { throw ItemStore.nothingFound(corrupt: corrupt) }
        return try ItemStore.result(for: items, query: query, single: query.limit.returnsSingle)
    }
}

extension ItemStore {
    /// The outer parts of a split read, to be used from any thread.
    public var splitReader: SplitReader { SplitReader(codec: codec) }

    /// The candidate rows and their class keys (needs exclusive access). A row of a class whose
    /// key is not loaded fails the whole call, as in `copyMatching`.
    public func fetch(_ prepared: PreparedSearch) throws(KeychainError) -> FetchedRows {
        try fetch(prepared.selection, maxBytes: nil)
    }

    /// Rows of one page: at most `pageRows`, and no more once their sealed bytes reach
    /// `pageBytes` (needs exclusive access). Memory per page is so bounded whatever the answer.
    public func fetchPage(_ selection: ItemTable.Selection) throws(KeychainError) -> FetchedRows {
        try fetch(selection, maxBytes: Self.pageBytes)
    }

    /// Rows and sealed bytes a page stops at (an answer frame holds about as much).
    static let pageRows = 256
    public static let pageBytes = 1 << 20

    private func fetch(_ selection: ItemTable.Selection, maxBytes: Int?) throws(KeychainError) -> FetchedRows {
        var rows: [(row: ItemRow, key: SecureKey)] = []
        var corrupt = 0
        var bytes = 0
        var last: Int64 = 0
        var read = 0
        var cut = false
        try table.forEach(selection) { (row) throws(KeychainError) -> Bool in
            read += 1
            last = row.rowid
            guard let pdmn = row.protection else {
                corrupt += 1
                return true
            }
            rows.append((row, try classKey(pdmn)))
            bytes += row.blob.count
            if let maxBytes, bytes >= maxBytes {
                cut = true
                return false
            }
            return true
        }
        let exhausted = !cut && (maxBytes == nil || read < Self.pageRows)
        return FetchedRows(rows: rows, corrupt: corrupt, lastRowID: last, exhausted: exhausted)
    }
}

