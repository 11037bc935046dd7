import DBus
import Foundation
import KeychainClient

/// The Secret Service's item calls (design 1.4–1.7): Service, Collection and Item members,
/// their properties, and the signals that follow changes.
extension SecretServiceBridge {
    static let labelProperty = "org.freedesktop.Secret.Item.Label"
    static let attributesProperty = "org.freedesktop.Secret.Item.Attributes"
    /// What gnome-keyring stores when a client (secret-tool) names no schema.
    static let genericSchema = "org.freedesktop.Secret.Generic"
    static let maxContentTypeBytes = 255
    static let maxSecretsPerCall = 4096

    // MARK: Service

    func serviceCall(_ call: BusMessage, member: String, sender: String) throws -> [BusValue]? {
        switch member {
        case "SearchItems":
            let pairs = try readAttributes(call)
            var unlocked: [String] = [], locked: [String] = []
            for collection in try collectionNames(sender) where collection != .session {
                for row in try stored(collection, sender).search(pairs) {
                    guard let id = ItemID(persistentRef: row.persistentRef) else { continue }
                    if row.locked { locked.append(collection.itemPath(id.hex)) } else { unlocked.append(collection.itemPath(id.hex)) }
                }
            }
            if !sessionItems.isEmpty {
                unlocked += sessionItems.search(pairs, groups: try groups(sender)).map(CollectionName.session.itemPath)
            }
            return [.objectPaths(unlocked), .objectPaths(locked)]
        case "GetSecrets":
            guard case .array("o", let paths) = try call.readValue() else { throw BusErrorReply.invalidArgs("GetSecrets takes an array of item paths") }
            // Each path costs a keychaind call while every other client waits: a bus message
            // could name a million.
            guard paths.count <= Self.maxSecretsPerCall else {
                throw BusErrorReply.limitsExceeded("GetSecrets takes at most \(Self.maxSecretsPerCall) items; ask for fewer at a time")
            }
            let sessionPath = try call.readObjectPath()
            let session = try sessions.session(sessionPath, of: sender)
            return [.array(element: "{o(oayays)}", try secrets(paths.compactMap(\.objectPathValue), session: session, sessionPath: sessionPath, sender: sender))]
        case "ReadAlias":
            let alias = try call.readString()
            return [.objectPath(try resolveAlias(alias, sender: sender)?.path ?? "/")]
        case "SetAlias":
            return try setAlias(call, sender: sender)
        case "CreateCollection":
            return try createCollection(call, sender: sender)
        case "Unlock":
            guard case .array("o", let objects) = try call.readValue() else { throw BusErrorReply.invalidArgs("Unlock takes an array of paths") }
            return try unlock(objects.compactMap(\.objectPathValue), sender: sender)
        case "Lock":
            guard case .array("o", let objects) = try call.readValue() else { throw BusErrorReply.invalidArgs("Lock takes an array of paths") }
            return try lock(objects.compactMap(\.objectPathValue), sender: sender)
        default:
            return nil
        }
    }

    // MARK: Collection

    func collectionCall(_ call: BusMessage, _ collection: CollectionName, member: String, sender: String) throws -> [BusValue]? {
        switch member {
        case "SearchItems":
            return [.objectPaths(try itemPaths(collection, try readAttributes(call), sender: sender))]
        case "CreateItem":
            guard let properties = try call.readValue().variantDictionaryValue else {
                throw BusErrorReply.invalidArgs("CreateItem's properties are not an a{sv}")
            }
            let secret = try readSecret(call, sender: sender)
            let replace = try call.readBool()
            let label = properties[Self.labelProperty]?.stringValue ?? ""
            var attributes = properties[Self.attributesProperty]?.stringDictionaryValue ?? [:]
            if attributes["xdg:schema"] == nil { attributes["xdg:schema"] = Self.genericSchema }
            let pairs = try SecretServiceAttributes(attributes)
            let created: (id: String, replaced: Bool)
            switch collection {
            case .login, .created:
                if case .created(let id) = collection { try requireCreated(id, sender) }
                created = try stored(collection, sender).create(label: label, attributes: pairs, contentType: secret.contentType,
                                                                secret: secret.value, replace: replace)
                noteModified(collection)
            case .session:
                created = try sessionItems.create(label: label, attributes: pairs, contentType: secret.contentType,
                                                  secret: secret.value, replace: replace, groups: try groups(sender),
                                                  app: try caller(sender).app)
            }
            let path = collection.itemPath(created.id)
            itemsChanged(collection, created.replaced ? "ItemChanged" : "ItemCreated", path)
            return [.objectPath(path), .objectPath("/")]
        case "Delete":
            return try deleteCollection(collection, sender: sender)
        default:
            return nil
        }
    }

    func itemPaths(_ collection: CollectionName, _ pairs: SecretServiceAttributes, sender: String) throws -> [String] {
        switch collection {
        case .login, .created:
            if case .created(let id) = collection { try requireCreated(id, sender) }
            return try stored(collection, sender).search(pairs).compactMap { ItemID(persistentRef: $0.persistentRef).map { collection.itemPath($0.hex) } }
        case .session:
            return sessionItems.search(pairs, groups: try groups(sender)).map(collection.itemPath)
        }
    }

    // MARK: Item

    func itemCall(_ call: BusMessage, _ collection: CollectionName, id: String, member: String, sender: String) throws -> [BusValue]? {
        let path = collection.itemPath(id)
        switch member {
        case "GetSecret":
            let sessionPath = try call.readObjectPath()
            let session = try sessions.session(sessionPath, of: sender)
            return [try secretStruct(collection, id: id, session: session, sessionPath: sessionPath, sender: sender)]
        case "SetSecret":
            let secret = try readSecret(call, sender: sender)
            switch collection {
            case .login, .created:
                try stored(collection, sender).update(try storedID(collection, id), ["v_Data": .data(secret.value), "xsct": .string(secret.contentType)])
                noteModified(collection)
            case .session:
                try sessionItems.update(id, groups: try groups(sender)) {
                    $0.secret = secret.value
                    $0.contentType = secret.contentType
                }
            }
            itemsChanged(collection, "ItemChanged", path)
            return []
        case "Delete":
            switch collection {
            case .login, .created:
                try stored(collection, sender).delete(try storedID(collection, id))
                noteModified(collection)
            case .session:
                try sessionItems.delete(id, groups: try groups(sender))
            }
            itemsChanged(collection, "ItemDeleted", path)
            return [.objectPath("/")]
        default:
            return nil
        }
    }

    /// The (oayays) of one item for a session: IsLocked, NoSuchObject as keychaind says.
    func secretStruct(_ collection: CollectionName, id: String, session: TransferSession, sessionPath: String,
                      sender: String) throws -> BusValue {
        let value: SecretBytes, contentType: String
        switch collection {
        case .login, .created:
            if let granted = presenceGrants.take(collection.itemPath(id), of: sender) {
                (value, contentType) = granted
            } else {
                let attributes = try stored(collection, sender).item(try storedID(collection, id), secret: true)
                value = attributes["v_Data"]?.bytesValue ?? .empty
                contentType = attributes["xsct"]?.stringValue ?? "text/plain"
            }
        case .session:
            let item = try sessionItems.item(id, groups: try groups(sender))
            value = item.secret
            contentType = item.contentType
        }
        let encoded = try session.encode(value)
        return .structure([.objectPath(sessionPath), .bytes(encoded.parameters), encoded.value, .string(contentType)])
    }

    /// GetSecrets' answer: the stored items' secrets in one keychaind call (op 48), the session
    /// collection's from memory. Missing, foreign and locked items are left out (libsecret
    /// asks for unlocked ones), as is an item whose path names another collection than its own.
    func secrets(_ paths: [String], session: TransferSession, sessionPath: String, sender: String) throws -> [BusValue] {
        var wanted: [(path: String, collection: CollectionName, id: String)] = []
        for path in paths {
            guard case .item(let collection, let id)? = try SecretObjectPath(path, alias: { try resolveAlias($0, sender: sender) }) else { continue }
            wanted.append((path, collection, id))
        }
        var refs: [[UInt8]] = []
        // Items that ask first, read once after the person's yes (Unlock's prompt).
        var granted: [String: (secret: SecretBytes, contentType: String)] = [:]
        for item in wanted where item.collection != .session {
            let own = item.collection.itemPath(item.id)
            if granted[own] == nil, let secret = presenceGrants.take(own, of: sender) {
                granted[own] = secret
            } else if let id = ItemID(hex: item.id) {
                refs.append(id.persistentRef)
            }
        }
        let stored = refs.isEmpty ? [:] : try delegated(sender).attributeSecrets(refs)
        var secrets: [BusValue] = []
        for item in wanted {
            let value: SecretBytes, contentType: String
            if item.collection == .session {
                guard let found = try? sessionItems.item(item.id, groups: try groups(sender)) else { continue }
                (value, contentType) = (found.secret, found.contentType)
            } else if let found = granted[item.collection.itemPath(item.id)] {
                (value, contentType) = found
            } else {
                guard let ref = ItemID(hex: item.id)?.persistentRef, let found = stored[ref],
                      found.service == "secret-service:" + item.collection.name else { continue }
                (value, contentType) = (found.secret, found.contentType)
            }
            let encoded = try session.encode(value)
            secrets.append(.entry(.objectPath(item.path), .structure([.objectPath(sessionPath), .bytes(encoded.parameters), encoded.value, .string(contentType)])))
        }
        return secrets
    }

    func storedID(_ collection: CollectionName, _ id: String) throws(BusErrorReply) -> ItemID {
        guard let itemID = ItemID(hex: id) else { throw .noSuchObject(collection.itemPath(id)) }
        return itemID
    }

    /// The bridge changed an item of `collection`: its Modified moves.
    func noteModified(_ collection: CollectionName) {
        let now = UInt64(Date().timeIntervalSince1970)
        switch collection {
        case .login: loginModified = now
        case .created(let id): createdModified[id] = now
        case .session: break
        }
    }

    // MARK: Properties

    /// Every property of `interface` on `path` (nil: no such interface there).
    /// `only`: the one property a Get asks for, so that a cheap one does not pay for `Items`
    /// (a listing of the whole collection).
    func propertyValues(path: SecretObjectPath, interface: String, sender: String, only: String? = nil) throws -> [String: BusValue]? {
        switch (path, interface) {
        case (.service, Self.serviceInterface):
            return ["Collections": .objectPaths(try collectionNames(sender).map(\.path))]
        case (.session, Self.sessionInterface):
            return [:]
        case (.collection(let collection), Self.collectionInterface):
            return try collectionProperties(collection, sender: sender, only: only)
        case (.item(let collection, let id), Self.itemInterface):
            let cached = try cachedRead(.itemProperties(path: collection.itemPath(id)), sender: sender) {
                .properties(try itemProperties(collection, id: id, sender: sender))
            }
            guard case .properties(var values) = cached else { return nil }
            // An item that asks first reads unlocked while the person's yes waits to be used.
            if values["Locked"] == .bool(true), presenceGrants.holds(collection.itemPath(id), of: sender) { values["Locked"] = .bool(false) }
            return values
        default:
            return nil
        }
    }

    func itemProperties(_ collection: CollectionName, id: String, sender: String) throws -> [String: BusValue] {
        switch collection {
        case .login, .created:
            let itemID = try storedID(collection, id)
            let store = try stored(collection, sender)
            let opened = Result { () throws(KeychainError) in try store.item(itemID) }
            if case .failure(let error) = opened, error.status == .interactionNotAllowed {
                // GetAll must not fail on a locked item (libsecret loads items with it).
                let row = try store.row(itemID)
                return ["Label": .string(""), "Attributes": .stringDictionary([:]), "Locked": .bool(true),
                        "Created": .uint64(UInt64(max(0, row.created))), "Modified": .uint64(UInt64(max(0, row.modified)))]
            }
            let attributes = try opened.get()
            var pairs: [String: String] = [:]
            if let encoded = attributes["xsat"]?.bytesValue {
                pairs = try SecretServiceAttributes(encoded: Array(encoded)).dictionary
            }
            // An item that asks first is locked to the Secret Service: its secret comes after
            // Unlock's prompt (the specification's way to ask), not from GetSecret.
            let asksFirst = AccessControl.asksPerson(AccessControl.storedFlags(attributes))
            return ["Label": .string(text(attributes["labl"])), "Attributes": .stringDictionary(pairs),
                    "Locked": .bool(asksFirst), "Created": .uint64(unixTime(attributes["cdat"])),
                    "Modified": .uint64(unixTime(attributes["mdat"]))]
        case .session:
            let item = try sessionItems.item(id, groups: try groups(sender))
            return ["Label": .string(item.label), "Attributes": .stringDictionary(item.attributes.dictionary),
                    "Locked": .bool(false), "Created": .uint64(item.created), "Modified": .uint64(item.modified)]
        }
    }

    func setProperty(path: SecretObjectPath, interface: String, name: String, value: BusValue, sender: String) throws {
        if case .collection(let collection) = path, interface == Self.collectionInterface, name == "Label" {
            return try setCollectionLabel(collection, value, sender: sender)
        }
        guard case .item(let collection, let id) = path, interface == Self.itemInterface, name == "Label" || name == "Attributes" else {
            guard let known = try propertyValues(path: path, interface: interface, sender: sender, only: name), known[name] != nil else {
                throw BusErrorReply.unknownProperty(interface, name)
            }
            throw BusErrorReply.propertyReadOnly(name)
        }
        var label: String?, pairs: SecretServiceAttributes?
        if name == "Label" {
            guard let text = value.stringValue else { throw BusErrorReply.invalidArgs("Label is a string") }
            label = text
        } else {
            guard let dictionary = value.stringDictionaryValue else { throw BusErrorReply.invalidArgs("Attributes is an a{ss}") }
            pairs = try SecretServiceAttributes(dictionary)
        }
        switch collection {
        case .login, .created:
            var changes: AttributeDictionary = [:]
            if let label { changes["labl"] = .string(label) }
            if let pairs { changes["xsat"] = .data(pairs.encoded) }
            try stored(collection, sender).update(try storedID(collection, id), changes)
            noteModified(collection)
        case .session:
            try sessionItems.update(id, groups: try groups(sender)) {
                if let label { $0.label = label }
                if let pairs { $0.attributes = pairs }
            }
        }
        itemsChanged(collection, "ItemChanged", collection.itemPath(id))
    }

    // MARK: Helpers

    /// a{ss} as the canonical set; over a limit of design 1.2: InvalidArgs.
    func readAttributes(_ call: BusMessage) throws -> SecretServiceAttributes {
        // Read straight into the dictionary, with no BusValue tree in between: every
        // SearchItems starts here.
        let dictionary: [String: String]
        do {
            dictionary = try call.readStringDictionary()
        } catch {
            throw BusErrorReply.invalidArgs("the attributes are not an a{ss}")
        }
        return try SecretServiceAttributes(dictionary)
    }

    /// A (oayays) from the caller, decoded with its session.
    func readSecret(_ call: BusMessage, sender: String) throws -> (value: SecretBytes, contentType: String) {
        try call.enterContainer(.structure, signature: "oayays")
        let sessionPath = try call.readObjectPath()
        let parameters = try call.readBytes()
        let value = try call.readSecretBytes()
        var contentType = try call.readString()
        try call.exitContainer()
        let session = try sessions.session(sessionPath, of: sender)
        guard contentType.utf8.count <= Self.maxContentTypeBytes else {
            throw BusErrorReply.invalidArgs("the content type is over \(Self.maxContentTypeBytes) bytes")
        }
        if contentType.isEmpty { contentType = "text/plain" }
        return (try session.decode(parameters: parameters, value: value), contentType)
    }

    /// ItemCreated/Changed/Deleted, then PropertiesChanged for Items. Items goes as
    /// invalidated, not with its value: each caller's list is its own, and a broadcast would
    /// show one app's paths to every other.
    func itemsChanged(_ collection: CollectionName, _ member: String, _ itemPath: String) {
        readCache.remove(itemPath: itemPath)
        do {
            try bus.emitSignal(path: collection.path, interface: Self.collectionInterface, member: member, [.objectPath(itemPath)])
            try bus.emitSignal(path: collection.path, interface: Self.propertiesInterface, member: "PropertiesChanged",
                               [.string(Self.collectionInterface), .variantDictionary([:]), .array(element: "s", [.string("Items")])])
        } catch {
            BridgeLog.error("cannot send \(member): \(error)")
        }
    }

    func keychainState() throws -> String {
        try keychain.status()["state"]?.stringValue ?? "unknown"
    }

    private func text(_ value: AttributeValue?) -> String {
        switch value {
        case .string(let s)?: s
        case .data(let d)?: String(decoding: Array(d), as: UTF8.self)
        default: ""
        }
    }

    private func unixTime(_ value: AttributeValue?) -> UInt64 {
        guard case .date(let absolute)? = value else { return 0 }
        return UInt64(max(0, absolute + absoluteTimeIntervalSince1970))
    }
}

extension BusMessage {
    /// The next value as an `a{ss}`, read straight into a dictionary (a repeated key keeps its
    /// last value, as `BusValue.stringDictionaryValue`); throws if it is anything else.
    func readStringDictionary() throws(KeychainError) -> [String: String] {
        try enterContainer(.array, signature: "{ss}")
        var dictionary: [String: String] = [:]
        while !atEnd {
            try enterContainer(.dictionaryEntry, signature: "ss")
            let key = try readString()
            dictionary[key] = try readString()
            try exitContainer()
        }
        try exitContainer()
        return dictionary
    }
}
