import KeychainClient
import KeychainModel

/// One created collection as its record holds it.
struct CollectionRecord: Sendable, Equatable {
    /// The record item's persistent reference (it changes when a backup is restored).
    let persistentRef: [UInt8]
    /// The collection's id: the 32 hex of its path element `c<id>` and of its items' service.
    let id: ItemID
    let label: String
    /// Unix seconds.
    let created: UInt64
    let modified: UInt64
    /// The record's attributes: its schema, `collection`, and `alias:NAME` = "1" per alias.
    let attributes: [String: String]

    func holds(alias: String) -> Bool { attributes[CreatedCollections.aliasAttribute(alias)] != nil }
}

/// The login collection's label as a client set it: a record like a created collection's, with
/// `collection=login`, so that it is kept per app (in its first group), outlives the bridge and
/// travels in backups.
struct LoginLabelRecord: Sendable, Equatable {
    let persistentRef: [UInt8]
    let label: String
}

/// Everything one keychaind call of the caller's records gives.
struct CollectionRecordSet: Sendable {
    var created: [CollectionRecord] = []
    var loginLabel: LoginLabelRecord?
}

/// The collections clients create (Service.CreateCollection), kept in keychaind so that they
/// outlive the bridge and keychaind and travel in backups (docs/secret-service.md, "Created
/// collections"). Each has a record: a Secret Service item of the reserved collection
/// `collections` (no path names it, so no client reaches a record as an item) in the creator's
/// first access group, whose label is the collection's label and whose attributes hold its id
/// (`collection` = 32 random hex) and its aliases (`alias:NAME` = "1"). The id is in the record,
/// not derived from the record's persistent id, since a restore gives items new persistent ids
/// while the collection's items keep their service "secret-service:c<id>". Every call is made
/// for the D-Bus caller, so a collection, its aliases and its items exist only for apps that
/// hold the record's group.
struct CreatedCollections {
    static let records = "collections"
    static let recordSchema = "org.keychaind.SecretService.Collection"
    static let idAttribute = "collection"
    /// The `collection` of the record holding login's label (not 32 hex, so no created
    /// collection has it).
    static let loginRecordID = "login"
    /// The aliases that always name the same collection (default is the one a client moves).
    static let fixedAliases: Set<String> = ["login", "session"]
    /// Created collections per caller: each costs a keychaind search in every Service.SearchItems.
    static let maxPerCaller = 64

    let keychain: DelegatedKeychain

    /// Records are of class ck whatever --protection says: they hold a label, not a secret, and
    /// a collection's Label should stay readable while the screen is locked.
    private var store: StoredCollection { StoredCollection(collection: Self.records, keychain: keychain, protection: "ck") }

    /// The caller's records, oldest first: one keychaind call. Before keychaind's first unlock
    /// they cannot be opened, and the caller has no created collections until then.
    func all() throws(KeychainError) -> CollectionRecordSet {
        let result: QueryResult
        do {
            result = try keychain.copyMatching([
                "class": .string("genp"), "svce": .string(store.service), "r_Attributes": .bool(true),
                "r_PersistentRef": .bool(true), "m_Limit": .string("m_LimitAll"),
            ])
        } catch where error.status == .itemNotFound || error.status == .interactionNotAllowed {
            return CollectionRecordSet()
        }
        guard case .list(let items) = result else { return CollectionRecordSet() }
        var records: [CollectionRecord] = []
        var loginLabel: (record: LoginLabelRecord, modified: UInt64)?
        for case .attributes(let attributes) in items {
            guard case .data(let ref)? = attributes["v_PersistentRef"], case .data(let xsat)? = attributes["xsat"],
                  let pairs = try? SecretServiceAttributes(encoded: Array(xsat)).dictionary else { continue }
            if pairs[Self.idAttribute] == Self.loginRecordID {
                // Two bridges setting it at once could add two: the newest wins.
                let modified = Self.unixTime(attributes["mdat"])
                if loginLabel == nil || modified >= loginLabel!.modified {
                    loginLabel = (LoginLabelRecord(persistentRef: Array(ref), label: attributes["labl"]?.stringValue ?? ""), modified)
                }
                continue
            }
            guard let id = pairs[Self.idAttribute].flatMap(ItemID.init(hex:)) else { continue }
            records.append(CollectionRecord(persistentRef: Array(ref), id: id, label: attributes["labl"]?.stringValue ?? "",
                                            created: Self.unixTime(attributes["cdat"]), modified: Self.unixTime(attributes["mdat"]),
                                            attributes: pairs))
        }
        return CollectionRecordSet(created: records.sorted { ($0.created, $0.id.hex) < ($1.created, $1.id.hex) },
                                   loginLabel: loginLabel?.record)
    }

    /// Sets the login collection's label for the caller: its record rewritten, or added.
    func setLoginLabel(_ label: String, existing: LoginLabelRecord?) throws(KeychainError) {
        if let existing {
            try keychain.update(["v_PersistentRef": .data(existing.persistentRef)], ["labl": .string(label)])
            return
        }
        _ = try store.create(label: label, attributes: try SecretServiceAttributes(["xdg:schema": Self.recordSchema, Self.idAttribute: Self.loginRecordID]),
                             contentType: "text/plain", secret: .empty, replace: false)
    }

    /// A new collection with a random id, holding `alias` if it is not empty (and, for an
    /// import, where it came from).
    func create(label: String, alias: String, extraAttributes: [String: String] = [:]) throws(KeychainError) -> ItemID {
        let id = ItemID.random()
        var pairs = extraAttributes.merging(["xdg:schema": Self.recordSchema, Self.idAttribute: id.hex]) { $1 }
        if !alias.isEmpty { pairs[Self.aliasAttribute(alias)] = "1" }
        _ = try store.create(label: label, attributes: try SecretServiceAttributes(pairs), contentType: "text/plain",
                             secret: .empty, replace: false)
        return id
    }

    func setLabel(_ record: CollectionRecord, _ label: String) throws(KeychainError) {
        try keychain.update(["v_PersistentRef": .data(record.persistentRef)], ["labl": .string(label)])
    }

    /// Moves `alias` to `target` (nil: to none): off every record that holds it, then onto
    /// `target`'s. Two writes, not one transaction: a failure between them leaves the alias
    /// on no record, which reads as login for `default`.
    func setAlias(_ alias: String, among records: [CollectionRecord], to target: CollectionRecord?) throws(KeychainError) {
        let name = Self.aliasAttribute(alias)
        for record in records where record.holds(alias: alias) && record.id != target?.id {
            try rewriteAttributes(record) { $0[name] = nil }
        }
        if let target, !target.holds(alias: alias) {
            try rewriteAttributes(target) { $0[name] = "1" }
        }
    }

    /// Deletes the collection's items (the caller's), then its record and so its aliases.
    func delete(_ record: CollectionRecord) throws(KeychainError) {
        try StoredCollection(collection: CollectionName.created(record.id).name, keychain: keychain, protection: "ck").deleteAll()
        try keychain.delete(["v_PersistentRef": .data(record.persistentRef)])
    }

    private func rewriteAttributes(_ record: CollectionRecord, _ change: (inout [String: String]) -> Void) throws(KeychainError) {
        var pairs = record.attributes
        change(&pairs)
        try keychain.update(["v_PersistentRef": .data(record.persistentRef)], ["xsat": .data(try SecretServiceAttributes(pairs).encoded)])
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
