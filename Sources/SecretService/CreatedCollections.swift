import KeychainClient
import KeychainModel

/// The collections clients create (Service.CreateCollection), kept in keychaind so that they
/// outlive the bridge and keychaind and travel in backups (docs/secret-service.md, "Created
/// collections"). Each has a record: a Secret Service item of the reserved collection
/// `collections` (no path names it, so no client reaches a record as an item) in the creator's
/// first access group, whose label is the collection's label and whose attributes hold its
/// aliases (`alias:NAME` = "1"). The collection is named by the record's id; its items are
/// ordinary Secret Service items of svce "secret-service:c<id>". Every call is made for the
/// D-Bus caller, so a collection, its aliases and its items exist only for apps that hold the
/// record's group.
struct CreatedCollections {
    static let records = "collections"
    static let recordSchema = "org.keychaind.SecretService.Collection"
    /// The aliases that always name the same collection (default is the one a client moves).
    static let fixedAliases: Set<String> = ["login", "session"]

    let keychain: DelegatedKeychain

    /// Records are of class ck whatever --protection says: they hold a label, not a secret, and
    /// a collection's Label should stay readable while the screen is locked.
    private var store: StoredCollection { StoredCollection(collection: Self.records, keychain: keychain, protection: "ck") }

    /// The caller's collections, oldest first (one indexed listing, nothing opened).
    func all() throws(KeychainError) -> [ItemID] {
        try store.search(SecretServiceAttributes([:])).compactMap { ItemID(persistentRef: $0.persistentRef) }
    }

    /// The caller's collection holding `alias`, or nil. Found by the attribute index, so it
    /// answers while the keychain is locked.
    func target(ofAlias alias: String) throws(KeychainError) -> ItemID? {
        let pairs = try SecretServiceAttributes([Self.aliasAttribute(alias): "1"])
        return try store.search(pairs).lazy.compactMap { ItemID(persistentRef: $0.persistentRef) }.first
    }

    func create(label: String, alias: String) throws(KeychainError) -> ItemID {
        var pairs = ["xdg:schema": Self.recordSchema]
        if !alias.isEmpty { pairs[Self.aliasAttribute(alias)] = "1" }
        let created = try store.create(label: label, attributes: try SecretServiceAttributes(pairs), contentType: "text/plain",
                                       secret: .empty, replace: false)
        guard let id = ItemID(hex: created.id) else { throw KeychainError(.decode, "keychaind gave a collection record an id of another form") }
        return id
    }

    /// The record's label, Created and Modified (Unix seconds); a locked record answers "" for
    /// its label. NoSuchObject for a collection the caller does not have.
    func properties(_ id: ItemID) throws(KeychainError) -> (label: String, created: UInt64, modified: UInt64) {
        do {
            let attributes = try store.item(id)
            return (attributes["labl"]?.stringValue ?? "", Self.unixTime(attributes["cdat"]), Self.unixTime(attributes["mdat"]))
        } catch where error.status == .interactionNotAllowed {
            let row = try store.row(id)
            return ("", UInt64(max(0, row.created)), UInt64(max(0, row.modified)))
        } catch where error.status == .itemNotFound {
            throw Self.noSuchCollection(id)
        }
    }

    func setLabel(_ id: ItemID, _ label: String) throws(KeychainError) {
        try translatingMissing(id) { () throws(KeychainError) in try store.update(id, ["labl": .string(label)]) }
    }

    /// Moves `alias` to collection `id` (nil: to none): off every record of the caller that
    /// holds it, then onto `id`'s. Two writes, not one transaction: a failure between them
    /// leaves the alias on no record, which reads as login for `default`.
    func setAlias(_ alias: String, to id: ItemID?) throws(KeychainError) {
        let name = Self.aliasAttribute(alias)
        let holders = try store.search(try SecretServiceAttributes([name: "1"])).compactMap { ItemID(persistentRef: $0.persistentRef) }
        for holder in holders where holder != id {
            try changeAttributes(holder) { $0[name] = nil }
        }
        if let id, !holders.contains(id) {
            try changeAttributes(id) { $0[name] = "1" }
        }
    }

    /// Deletes the collection's items, then its record (and so its aliases).
    func delete(_ id: ItemID) throws(KeychainError) {
        _ = try translatingMissing(id) { () throws(KeychainError) in try store.row(id) }
        try StoredCollection(collection: CollectionName.created(id).name, keychain: keychain, protection: "ck").deleteAll()
        try translatingMissing(id) { () throws(KeychainError) in try store.delete(id) }
    }

    private func changeAttributes(_ id: ItemID, _ change: (inout [String: String]) -> Void) throws(KeychainError) {
        let attributes = try store.item(id)
        guard case .data(let encoded)? = attributes["xsat"] else {
            throw KeychainError(.decode, "a collection record has no attributes")
        }
        var pairs = try SecretServiceAttributes(encoded: Array(encoded)).dictionary
        change(&pairs)
        try store.update(id, ["xsat": .data(try SecretServiceAttributes(pairs).encoded)])
    }

    private func translatingMissing<T>(_ id: ItemID, _ body: () throws(KeychainError) -> T) throws(KeychainError) -> T {
        do {
            return try body()
        } catch where error.status == .itemNotFound {
            throw Self.noSuchCollection(id)
        }
    }

    static func noSuchCollection(_ id: ItemID) -> KeychainError {
        KeychainError(.itemNotFound, "there is no collection \(CollectionName.created(id).path)")
    }

    static func aliasAttribute(_ alias: String) -> String { "alias:" + alias }

    /// An alias a client may give: it becomes a path element (/aliases/NAME), so 1 to 64 bytes of
    /// A-Z, a-z, 0-9 and _.
    static func isValidAlias(_ alias: String) -> Bool {
        (1...64).contains(alias.utf8.count) && alias.utf8.allSatisfy {
            ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F
        }
    }

    private static func unixTime(_ value: AttributeValue?) -> UInt64 {
        guard case .date(let absolute)? = value else { return 0 }
        return UInt64(max(0, absolute + absoluteTimeIntervalSince1970))
    }
}
