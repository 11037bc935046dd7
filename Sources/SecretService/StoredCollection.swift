import KeychainClient

/// A persistent collection (`login`, or one a client created): genp items in keychaind whose
/// svce is "secret-service:" and the collection's name, every call made on behalf of the D-Bus
/// caller, so keychaind decides with that caller's groups (design 1.1, 1.5).
struct StoredCollection {
    /// The collection's name: "login", or "c" and its record's hex id.
    let collection: String
    let keychain: DelegatedKeychain
    /// The class of new items: "ck" (after first unlock) or "ak" (when unlocked).
    let protection: String
    /// accc flags of new items (the bridge's --require); 0: none.
    var accessFlags: UInt32 = 0

    var service: String { "secret-service:" + collection }

    /// Items holding every pair (exact: exactly these), locked ones included.
    func search(_ pairs: SecretServiceAttributes, exact: Bool = false) throws(KeychainError) -> [SecretServiceRow] {
        try keychain.attributeSearch(collection: collection, exact: exact, pairs: pairs)
    }

    /// CreateItem: one keychaind call, which with `replace` rewrites the caller's item with
    /// exactly these attributes instead of adding one.
    func create(label: String, attributes: SecretServiceAttributes, contentType: String, secret: SecretBytes,
                replace: Bool) throws(KeychainError) -> (id: String, replaced: Bool) {
        var item: AttributeDictionary = [
            "class": .string("genp"), "svce": .string(service), "xsat": .data(attributes.encoded),
            "labl": .string(label), "xsct": .string(contentType), "v_Data": .data(secret),
        ]
        // With constraints the class is accc's alone (keychaind refuses pdmn beside it).
        if accessFlags != 0 { item["accc"] = .string("\(protection);\(accessFlags)") } else { item["pdmn"] = .string(protection) }
        let added = try keychain.attributeAdd(item, replace: replace)
        guard let id = ItemID(persistentRef: added.persistentRef) else {
            throw KeychainError(.decode, "keychaind answered attributeAdd with a persistent reference of another class")
        }
        return (id.hex, added.replaced)
    }

    /// The item's attributes (and with `secret`, v_Data): NoSuchObject for a path that is not
    /// one of the caller's items of this collection, IsLocked when its class is locked or it
    /// asks the person first (never asked here: that waits on the person, and the bridge's
    /// thread serves every client; Unlock's prompt asks).
    func item(_ id: ItemID, secret: Bool = false) throws(KeychainError) -> AttributeDictionary {
        var query: AttributeDictionary = ["v_PersistentRef": .data(id.persistentRef), "r_Attributes": .bool(true)]
        if secret {
            query["r_Data"] = .bool(true)
            query["u_AuthUI"] = .string("u_AuthUIF")
        }
        guard case .single(.attributes(let attributes)) = try keychain.copyMatching(query),
              attributes["svce"]?.stringValue == service else {
            throw KeychainError(.itemNotFound, "there is no such item in the collection \(collection)")
        }
        return attributes
    }

    /// The row of one item, from a search of the whole collection (for a locked item, whose
    /// attributes cannot be opened).
    func row(_ id: ItemID) throws(KeychainError) -> SecretServiceRow {
        let ref = id.persistentRef
        guard let row = try search(SecretServiceAttributes([:])).first(where: { $0.persistentRef == ref }) else {
            throw KeychainError(.itemNotFound, "there is no such item in the collection \(collection)")
        }
        return row
    }

    /// An item that asks first is IsLocked here too: its update asks the person (as securityd's
    /// does), which the bridge's thread never waits for.
    func update(_ id: ItemID, _ changes: AttributeDictionary) throws(KeychainError) {
        _ = try item(id)
        try keychain.update(["v_PersistentRef": .data(id.persistentRef), "u_AuthUI": .string("u_AuthUIF")], changes)
    }

    /// Deletes without opening the item: works while it is locked, as deletes do.
    func delete(_ id: ItemID) throws(KeychainError) {
        let ref = id.persistentRef
        guard try search(SecretServiceAttributes([:])).contains(where: { $0.persistentRef == ref }) else {
            throw KeychainError(.itemNotFound, "there is no such item in the collection \(collection)")
        }
        try keychain.delete(["v_PersistentRef": .data(ref)])
    }
}

/// An item's path element: the 32 lowercase hex digits of its 16-byte persistent id.
struct ItemID: Hashable, Sendable {
    let bytes: [UInt8]

    init?(hex: String) {
        let digits = Array(hex.utf8)
        guard digits.count == 32 else { return nil }
        var bytes: [UInt8] = []
        for i in stride(from: 0, to: 32, by: 2) {
            guard let high = Self.nibble(digits[i]), let low = Self.nibble(digits[i + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        self.bytes = bytes
    }

    init?(persistentRef: [UInt8]) {
        guard persistentRef.count == 20, Array(persistentRef.prefix(4)) == Array("genp".utf8) else { return nil }
        bytes = Array(persistentRef.dropFirst(4))
    }

    private init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// 16 random bytes: a created collection's id (not a secret; unique without a counter).
    static func random() -> ItemID {
        var generator = SystemRandomNumberGenerator()
        return ItemID(bytes: (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    var persistentRef: [UInt8] { Array("genp".utf8) + bytes }

    var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}

extension StoredCollection {
    /// Deletes every item of the collection that the caller holds, unopened (Collection.Delete,
    /// which works while the keychain is locked, as item deletes do).
    func deleteAll() throws(KeychainError) {
        for row in try search(SecretServiceAttributes([:])) {
            try keychain.delete(["v_PersistentRef": .data(row.persistentRef)])
        }
    }
}
