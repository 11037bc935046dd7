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
