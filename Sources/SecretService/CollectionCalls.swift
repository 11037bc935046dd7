import DBus
import Foundation
import KeychainClient
import KeychainModel

/// The Secret Service's collection calls: CreateCollection, SetAlias, ReadAlias,
/// Collection.Delete, collection properties, and the lookups of a caller's created collections
/// and aliases (CreatedCollections.swift holds the records).
extension SecretServiceBridge {
    static let collectionLabelProperty = "org.freedesktop.Secret.Collection.Label"

    /// The collections `sender` has: login, session, then its created ones, oldest first.
    func collectionNames(_ sender: String) throws -> [CollectionName] {
        [.login, .session] + (try collectionRecords(sender)).map { .created($0.id) }
    }

    /// The records of `sender`'s created collections, from the cache or one keychaind call.
    func collectionRecords(_ sender: String) throws -> [CollectionRecord] {
        try recordSet(sender).created
    }

    /// The caller's records (created collections, login's label), from the cache or one keychaind call.
    func recordSet(_ sender: String) throws -> CollectionRecordSet {
        let cached = try cachedRead(.collectionRecords, sender: sender) { .collectionRecords(try created(sender).all()) }
        guard case .collectionRecords(let records) = cached else { return CollectionRecordSet() }
        return records
    }

    /// Where `alias` points for `sender`: login and session are fixed; `default` is the
    /// caller's collection holding it, else login; any other alias a created collection's, else nil.
    func resolveAlias(_ alias: String, sender: String) throws -> CollectionName? {
        if CreatedCollections.fixedAliases.contains(alias) { return CollectionName(fixedAlias: alias) }
        guard CreatedCollections.isValidAlias(alias) else { return nil }
        if let holder = try collectionRecords(sender).first(where: { $0.holds(alias: alias) }) { return .created(holder.id) }
        return alias == "default" ? .login : nil
    }

    /// The record of `sender`'s collection `id`; NoSuchObject if it has none.
    @discardableResult
    func requireCreated(_ id: ItemID, _ sender: String) throws -> CollectionRecord {
        guard let record = try collectionRecords(sender).first(where: { $0.id == id }) else {
            throw BusErrorReply.noSuchObject(CollectionName.created(id).path)
        }
        return record
    }

    /// CreateCollection(props, alias): an alias that resolves already returns its collection
    /// (libsecret's retry path); otherwise a new collection, with the alias if one is given.
    /// No prompt.
    func createCollection(_ call: BusMessage, sender: String) throws -> [BusValue] {
        guard let properties = try call.readValue().variantDictionaryValue else {
            throw BusErrorReply.invalidArgs("CreateCollection's properties are not an a{sv}")
        }
        let alias = try call.readString()
        guard alias.isEmpty || CreatedCollections.isValidAlias(alias) else {
            throw BusErrorReply.invalidArgs("an alias is 1 to 64 bytes of A-Z, a-z, 0-9 and _")
        }
        if !alias.isEmpty, let existing = try resolveAlias(alias, sender: sender) {
            return [.objectPath(existing.path), .objectPath("/")]
        }
        let label = properties[Self.collectionLabelProperty]?.stringValue ?? ""
        // Each costs a keychaind search in every Service.SearchItems of this caller.
        guard try collectionRecords(sender).count < CreatedCollections.maxPerCaller else {
            throw BusErrorReply.limitsExceeded("an app may create at most \(CreatedCollections.maxPerCaller) collections; delete one first")
        }
        let id = try created(sender).create(label: label, alias: alias)
        let collection = CollectionName.created(id)
        collectionsChanged("CollectionCreated", collection)
        return [.objectPath(collection.path), .objectPath("/")]
    }

    /// SetAlias(name, collection): `default` (or any alias but the fixed login and session)
    /// moves to a created collection, or back to login with the login path or "/".
    func setAlias(_ call: BusMessage, sender: String) throws -> [BusValue] {
        let alias = try call.readString()
        let target = try call.readObjectPath()
        guard !CreatedCollections.fixedAliases.contains(alias) else {
            throw BusErrorReply.notSupported("the aliases login and session are fixed")
        }
        guard CreatedCollections.isValidAlias(alias) else { throw BusErrorReply.invalidArgs("an alias is 1 to 64 bytes of A-Z, a-z, 0-9 and _") }
        let collection: CollectionName? = target == "/" ? nil : try SecretObjectPath(target, alias: { try resolveAlias($0, sender: sender) }).flatMap {
            guard case .collection(let name) = $0 else { return nil }
            return name
        }
        switch collection {
        case nil where target != "/":
            throw BusErrorReply.noSuchObject(target)
        case .session?:
            throw BusErrorReply.notSupported("the session collection lives in the bridge's memory; an alias must outlive it")
        case .login? where alias != "default":
            throw BusErrorReply.notSupported("only default can name the login collection")
        case .created(let id)?:
            let target = try requireCreated(id, sender)
            try created(sender).setAlias(alias, among: try collectionRecords(sender), to: target)
        default:
            // "/" or login: the alias names no created collection (default reads as login again).
            try created(sender).setAlias(alias, among: try collectionRecords(sender), to: nil)
        }
        readCache.removeAll()
        return []
    }

    /// Collection.Delete of a created collection: its items, then its record. The login and
    /// session collections stay.
    func deleteCollection(_ collection: CollectionName, sender: String) throws -> [BusValue] {
        guard case .created(let id) = collection else {
            throw BusErrorReply.notSupported("the collection \(collection.name) cannot be deleted; only collections made with CreateCollection can")
        }
        try created(sender).delete(try requireCreated(id, sender))
        createdModified[id] = nil
        collectionsChanged("CollectionDeleted", collection)
        return [.objectPath("/")]
    }

    /// Collection.Label is read-write for every collection (spec 0.2). login's is kept in a
    /// record in keychaind for the caller (its first group), the session collection's in the
    /// bridge's memory for the caller's first group, a created collection's in its own record.
    func setCollectionLabel(_ collection: CollectionName, _ value: BusValue, sender: String) throws {
        guard let label = value.stringValue else { throw BusErrorReply.invalidArgs("Label is a string") }
        guard label.utf8.count <= KeychainLimits.maxAttributeBytes else {
            throw BusErrorReply.invalidArgs("a label is at most \(KeychainLimits.maxAttributeBytes) bytes")
        }
        switch collection {
        case .login:
            try created(sender).setLoginLabel(label, existing: try recordSet(sender).loginLabel)
            loginModified = UInt64(Date().timeIntervalSince1970)
        case .session:
            guard let group = try groups(sender).first else { throw BusErrorReply.accessDenied("keychaind gives this caller no access group") }
            try sessionLabels.set(label, for: group)
        case .created(let id):
            try created(sender).setLabel(try requireCreated(id, sender), label)
            createdModified[id] = UInt64(Date().timeIntervalSince1970)
        }
        readCache.removeAll()
        do {
            try bus.emitSignal(path: collection.path, interface: Self.propertiesInterface, member: "PropertiesChanged",
                               [.string(Self.collectionInterface), .variantDictionary([:]), .array(element: "s", [.string("Label")])])
            try bus.emitSignal(path: SecretObjectPath.root, interface: Self.serviceInterface, member: "CollectionChanged", [.objectPath(collection.path)])
        } catch {
            BridgeLog.error("cannot signal a collection's new label: \(error)")
        }
    }

    /// A collection's properties (Items only when asked for, or for GetAll).
    func collectionProperties(_ collection: CollectionName, sender: String, only: String?) throws -> [String: BusValue] {
        var values: [String: BusValue]
        switch collection {
        case .login:
            let label = only == nil || only == "Label" ? try recordSet(sender).loginLabel?.label ?? "Login" : "Login"
            values = ["Label": .string(label), "Created": .uint64(0), "Modified": .uint64(loginModified)]
            if only == nil || only == "Locked" { values["Locked"] = .bool(try keychainState() != "unlocked") }
        case .session:
            let label = only == nil || only == "Label" ? sessionLabels.label(for: try groups(sender).first) : "Session"
            values = ["Label": .string(label), "Locked": .bool(false), "Created": .uint64(0), "Modified": .uint64(0)]
        case .created(let id):
            let record = try requireCreated(id, sender)
            values = ["Label": .string(record.label), "Created": .uint64(record.created),
                      "Modified": .uint64(max(record.modified, createdModified[id] ?? 0))]
            // One lock state: keychaind's, as for login.
            if only == nil || only == "Locked" { values["Locked"] = .bool(try keychainState() != "unlocked") }
        }
        if only == nil || only == "Items" {
            values["Items"] = .objectPaths(try itemPaths(collection, SecretServiceAttributes([:]), sender: sender))
        }
        return values
    }

    /// CollectionCreated or CollectionDeleted on the service, then Collections invalidated
    /// (each caller's list is its own, so its value is not broadcast).
    func collectionsChanged(_ member: String, _ collection: CollectionName) {
        readCache.removeAll()
        do {
            try bus.emitSignal(path: SecretObjectPath.root, interface: Self.serviceInterface, member: member, [.objectPath(collection.path)])
            try bus.emitSignal(path: SecretObjectPath.root, interface: Self.propertiesInterface, member: "PropertiesChanged",
                               [.string(Self.serviceInterface), .variantDictionary([:]), .array(element: "s", [.string("Collections")])])
        } catch {
            BridgeLog.error("cannot send \(member): \(error)")
        }
    }
}
