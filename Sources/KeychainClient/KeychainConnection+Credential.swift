import KeychainModel
import KeychainProtocol

/// systemd's LoadCredential= from keychaind (docs/credentials.md).
extension KeychainConnection {
    /// What the credential socket would give `unit` for credential `id` (admin): the item's
    /// attributes and "size", never its secret; the error that would fail the unit otherwise.
    /// `userUID`: a unit of that user's manager, not a system unit.
    public func credentialLookup(unit: String, id: String, userUID: UInt32? = nil) throws(KeychainError) -> AttributeDictionary {
        var query: AttributeDictionary = ["unit": .string(unit), "id": .string(id)]
        if let userUID { query["uid"] = .int(Int64(userUID)) }
        return try perform(Calls.attributes(.credentialLookup(query), "credential lookup"))
    }
}
