import KeychainModel
import KeychainStorage

/// How one class's rows are selected for a query: attributes with a column by SQL equality of
/// their keyed hashes (16 bytes of keyed BLAKE2b: a false match is a 2^-128 event), the others
/// checked on the opened item by `AttributeSpec.matchKey`.
struct SearchPlan {
    var filter: RowFilter
    /// Attributes without a column, matched after decryption.
    var checks: [(spec: AttributeSpec, value: AttributeValue)]

    /// Rows must be opened (and their attributes decoded) to know whether they match.
    var needsOpening: Bool { !checks.isEmpty }

    func matches(_ item: StoredItem) -> Bool {
        for (spec, value) in checks {
            guard let stored = item.attributes[spec.code] else { return false }
            if spec.matchKey(stored) != spec.matchKey(value) { return false }
        }
        return true
    }
}

extension ItemStore {
    /// Builds the plan for `attributes` (coerced query attributes of class `cls`) within `groups`.
    func plan(_ cls: ItemClass, attributes: AttributeDictionary, groups: [String], query: ItemQuery) -> SearchPlan {
        Self.plan(cls, attributes: attributes, groups: groups, query: query, codec: codec)
    }

    /// `plan` with the codec given: it needs nothing else, so a split read plans off the lock.
    static func plan(_ cls: ItemClass, attributes: AttributeDictionary, groups: [String], query: ItemQuery,
                     codec: ItemCodec) -> SearchPlan {
        let schema = ClassSchema.of(cls)!
        var filter = RowFilter(itemClass: cls, accessGroups: groups)
        var checks: [(AttributeSpec, AttributeValue)] = []
        // Absent sync means sync = 0 (Apple): nothing synchronizable unless asked; "syna" and a
        // persistent reference lift the filter.
        if case .int(let s)? = attributes["sync"] {
            filter.sync = s
        } else if !query.matchesAnySync && query.persistentRef == nil {
            filter.sync = 0
        }
        filter.persistentID = query.persistentRef?.id
        for (code, value) in attributes {
            guard let spec = schema.spec(code) else { continue }
            switch code {
            case "agrp", "sync": continue  // groups and sync are filtered above
            case "pdmn": filter.protection = value.stringValue.flatMap(Protection.init(rawValue:))
            default:
                if spec.hasColumn {
                    filter.hashes.append((code, codec.hash(spec, value)))
                } else {
                    checks.append((spec, value))
                }
            }
        }
        return SearchPlan(filter: filter, checks: checks)
    }

    /// Opens and checks the rows a plan selects, up to `limit` matches. A row of a locked class
    /// fails the whole call (errSecInteractionNotAllowed, as on iOS); an altered row is skipped
    /// and reported in `corrupt`.
    func find(_ plan: SearchPlan, limit: Int?, withAttributes: Bool) throws(KeychainError) -> (items: [StoredItem], corrupt: Int) {
        var items: [StoredItem] = []
        var corrupt = 0
        let decode = withAttributes || plan.needsOpening
        try table.forEach(plan.filter) { (row) throws(KeychainError) -> Bool in
            let item: StoredItem
            do throws(KeychainError) {
                item = try open(row, withAttributes: decode)
            } catch where error.status == .decode {
                corrupt += 1
                return true
            }
            if plan.matches(item) { items.append(item) }
            return limit.map { items.count < $0 } ?? true
        }
        return (items, corrupt)
    }

    /// errSecItemNotFound, or errSecDecode when the only candidates were altered rows.
    public static func nothingFound(corrupt: Int) -> KeychainError {
        corrupt > 0
            ? KeychainError(.decode, "the matching item cannot be decrypted: its row in the database was altered")
            : KeychainError(.itemNotFound, "no item matches the query")
    }
}
