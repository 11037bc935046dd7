import KeychainCrypto
import KeychainModel
import KeychainStorage

/// A CopyMatching split in three, so that a server serialising access to the store holds its
/// lock only for the middle part (the SQL lookup): parsing and planning before, decryption
/// and shaping the result after, run concurrently. The outer two touch only state that never
/// changes after init (the schema, the lookup-hash key, the item codec), so they are safe to
/// call from several threads at once; `fetch` needs the same exclusive access as every other
/// call.
public struct PreparedSearch: @unchecked Sendable {
    let query: ItemQuery
    let plan: SearchPlan
    /// The rows were cut off by SQL LIMIT: if some of them turn out to be altered, there may be
    /// more matches beyond the cut, and the full path must run instead.
    let limitedInSQL: Bool
    /// The plan's filter as SQL, built before the lock is taken.
    let selection: ItemTable.Selection
}

/// The rows a prepared search selected, each with the class key that opens it.
public struct FetchedRows: @unchecked Sendable {
    let rows: [(row: ItemRow, key: SecureKey)]
    let corrupt: Int
}

extension ItemStore {
    /// Parses and plans a CopyMatching (thread-safe). nil when the query needs the general
    /// path (identities, which join two classes).
    public func prepareSearch(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> PreparedSearch? {
        let query = try ItemQuery(dict, for: .copyMatching)
        guard query.itemClass != .identity else { return nil }
        if query.returnRef && query.itemClass != .genericPassword && query.itemClass != .internetPassword {
            throw KeychainError(.unimplemented, "r_Ref: object references do not cross the socket; ask for r_Data or r_Attributes")
        }
        let groups = try scope.groups(naming: query.accessGroup)
        var plan = plan(query.itemClass, attributes: query.attributes, groups: groups, query: query)
        let limited = plan.checks.isEmpty && query.limit.maxRows != nil
        if limited { plan.filter.limit = query.limit.maxRows }
        return PreparedSearch(query: query, plan: plan, limitedInSQL: limited, selection: ItemTable.selection(plan.filter))
    }

    /// The candidate rows and their class keys (needs exclusive access). A row of a class whose
    /// key is not loaded fails the whole call, as in `copyMatching`.
    public func fetch(_ prepared: PreparedSearch) throws(KeychainError) -> FetchedRows {
        var rows: [(row: ItemRow, key: SecureKey)] = []
        var corrupt = 0
        try table.forEach(prepared.selection) { (row) throws(KeychainError) -> Bool in
            guard let pdmn = row.protection else {
                corrupt += 1
                return true
            }
            rows.append((row, try classKey(pdmn)))
            return true
        }
        return FetchedRows(rows: rows, corrupt: corrupt)
    }

    /// Opens, matches and shapes the result (thread-safe). nil when altered rows inside a SQL
    /// limit leave the answer incomplete: run `copyMatching` instead.
    public func finish(_ prepared: PreparedSearch, _ fetched: FetchedRows) throws(KeychainError) -> QueryResult? {
        let query = prepared.query
        let decode = query.returnAttributes || prepared.plan.needsOpening
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
        guard !items.isEmpty else { throw Self.nothingFound(corrupt: corrupt) }
        return try result(for: items, query: query, single: query.limit.returnsSingle)
    }
}
