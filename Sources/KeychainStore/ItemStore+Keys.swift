import KeychainCrypto
import KeychainModel

/// Keys that live in the daemon (docs/keys.md): generated or imported as `keys` items with the
/// attributes Apple gives a SecKey, and used through the key calls without their bytes ever
/// leaving the daemon when they are not extractable.
extension ItemStore {
    /// Attributes that are facts about the key's bytes, or its history: fixed once the key is
    /// stored (an update that names them is refused).
    static let derivedKeyAttributes: Set<String> = ["kcls", "type", "bsiz", "esiz", "klbl", "asen", "next"]

    /// kSecAttrKeyClass of a private key.
    static let privateKeyClass: Int64 = 1

    /// Generates a private key of the `type` the attributes name and stores it like an import.
    /// Returns the stored item's attributes with its v_PersistentRef.
    public func generateKey(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> QueryResult {
        for key in dict.keys where key == "v_Data" || key.hasPrefix("r_") || key == "v_PersistentRef" {
            throw KeychainError(.param, "\(key) has no place in a key generation: the daemon makes the key and answers with its attributes")
        }
        var item = dict
        item["class"] = .string(ItemClass.key.rawValue)
        if let given = item["kcls"], given != .int(Self.privateKeyClass), given != .string("1") {
            throw KeychainError(.param, "a generated key is a private key (kcls 1)")
        }
        item["kcls"] = .int(Self.privateKeyClass)
        let type = try Self.keyType(named: item["type"])
        let key = PrivateKey.generate(type)
        item["v_Data"] = .data(key.bytes)
        item["r_Attributes"] = .bool(true)
        item["r_PersistentRef"] = .bool(true)
        return try add(item, scope: scope)
    }

    /// The `type` attribute as a key type keychaind uses: 73 (P-256), 105 (Ed25519), 106
    /// (X25519), as a number or its decimal text. errSecParam otherwise.
    static func keyType(named value: AttributeValue?) throws(KeychainError) -> KeyType {
        var number: Int64?
        switch value {
        case .int(let n)?: number = n
        case .string(let s)?: number = Int64(s)
        default: break
        }
        guard let number, let type = KeyType(attributeNumber: number) else {
            throw KeychainError(.param, "type must be a key type keychaind supports: 73 (P-256), 105 (Ed25519) or 106 (X25519)")
        }
        return type
    }

    /// On add: a private key (kcls 1) of a type keychaind knows is checked and given the
    /// attributes Apple derives for a SecKey; any other keys item is stored as given.
    func fillKeyAttributes(_ attributes: inout AttributeDictionary, data: SecretBytes?) throws(KeychainError) {
        guard attributes["kcls"] == .int(Self.privateKeyClass), let typeValue = attributes["type"],
              case .int(let number) = typeValue, let type = KeyType(attributeNumber: number) else { return }
        guard let data else {
            throw KeychainError(.param, "a \(type.rawValue) private key needs its bytes in v_Data (or generate one with the key-generate call)")
        }
        let key = try PrivateKey(type: type, bytes: data)
        if let bsiz = attributes["bsiz"], bsiz != .int(0), bsiz != .int(type.bits) {
            throw KeychainError(.param, "a \(type.rawValue) key is \(type.bits) bits")
        }
        attributes["bsiz"] = .int(type.bits)
        attributes["esiz"] = .int(type.bits)
        attributes["klbl"] = .data(key.applicationLabel)
        let extractable = attributes["extr"].map { $0 == .int(1) } ?? false
        attributes["extr"] = .int(extractable ? 1 : 0)
        attributes["sens"] = .int(extractable ? 0 : 1)
        attributes["asen"] = attributes["sens"]
        attributes["next"] = .int(extractable ? 0 : 1)
        attributes["perm"] = .int(1)
        attributes["priv"] = .int(1)
        attributes["modi"] = attributes["modi"] ?? .int(1)
        for (flag, on) in Self.usage(of: type) where attributes[flag] == nil {
            attributes[flag] = .int(on ? 1 : 0)
        }
    }

    /// The usage flags a private key of `type` gets unless the caller set them: what the key
    /// can do. The public-key flags (encr, vrfy, wrap) belong to the public key, which
    /// keychaind derives on demand rather than storing, and are 0 here as on Apple's private
    /// key items; wrap/unwrap are not offered.
    static func usage(of type: KeyType) -> [(String, Bool)] {
        [("sign", type.signs), ("drve", type.agrees), ("decr", type.agrees),
         ("encr", false), ("vrfy", false), ("wrap", false), ("unwp", false), ("snrc", false), ("vyrc", false)]
    }

    // MARK: the key calls

    /// The private key the query names (the first match, as CopyMatching's default limit),
    /// within the caller's groups, with `usage` (sign, drve, decr) on. errSecItemNotFound when
    /// none matches; errSecInteractionNotAllowed while its class key is locked; errSecParam
    /// when the flag is off or the item is not a key keychaind can use.
    public func privateKey(_ dict: AttributeDictionary, usage: String?, scope: AccessScope) throws(KeychainError) -> PrivateKey {
        var query = dict
        query["class"] = .string(ItemClass.key.rawValue)
        // A persistent reference names one item and may not be joined by attributes.
        if query["v_PersistentRef"] == nil { query["kcls"] = .int(Self.privateKeyClass) }
        let parsed = try ItemQuery(query, for: .copyMatching)
        let groups = try scope.groups(naming: parsed.accessGroup)
        let plan = plan(.key, attributes: parsed.attributes, groups: groups, query: parsed)
        let (items, corrupt) = try find(plan, limit: 1, withAttributes: true)
        guard let item = items.first else { throw Self.nothingFound(corrupt: corrupt) }
        guard item.attributes["kcls"] == .int(Self.privateKeyClass) else {
            throw KeychainError(.param, "the item is not a private key (kcls 1)")
        }
        let type = try Self.keyType(named: item.attributes["type"])
        if let usage, item.attributes[usage] != .int(1) {
            throw KeychainError(.param, "the key's \(Self.usageName[usage] ?? usage) is off: algorithm not supported by the key")
        }
        return try PrivateKey(stored: item.data, type: type)
    }

    static let usageName = ["sign": "kSecAttrCanSign (sign)", "drve": "kSecAttrCanDerive (drve)", "decr": "kSecAttrCanDecrypt (decr)"]

    // MARK: the non-extractable rule

    /// A stored private key whose bytes never leave the daemon: extr is 0. Keys items from
    /// before keychaind held keys carry no extr and are returned as they always were.
    static func isSealedKey(_ item: StoredItem) -> Bool {
        item.itemClass == .key && item.attributes["extr"] == .int(0)
    }

    /// Whether a query's items must be decoded for the non-extractable rule: a keys item's
    /// data cannot be handed out before its extr is known.
    static func needsKeyAttributes(_ query: ItemQuery) -> Bool {
        query.itemClass == .key && query.returnData
    }

    /// Refuses an update that would change what a stored key is or let its bytes out.
    static func checkKeyChange(_ item: StoredItem, _ changes: ItemChanges) throws(KeychainError) {
        guard item.itemClass == .key, item.attributes["extr"] != nil,
              item.attributes["kcls"] == .int(privateKeyClass),
              case .int(let number)? = item.attributes["type"], KeyType(attributeNumber: number) != nil else { return }
        if item.attributes["extr"] == .int(0), let extr = changes.attributes["extr"], extr != .int(0) {
            throw KeychainError(.param, "a non-extractable key cannot be made extractable")
        }
        for code in changes.attributes.keys where derivedKeyAttributes.contains(code) {
            if changes.attributes[code] != item.attributes[code] {
                throw KeychainError(.param, "\(code) is derived from the key's bytes or history and cannot change")
            }
        }
        if changes.data != nil {
            throw KeychainError(.param, "a stored key's bytes cannot change: delete it and import the new key")
        }
    }
}

/// The key calls: the key the query finds, used in the daemon.
extension ItemStore {
    public func publicKey(_ query: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> [UInt8] {
        try privateKey(query, usage: nil, scope: scope).publicKey
    }

    /// Needs the key's sign flag.
    public func sign(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> [UInt8] {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.signingAlgorithm()
        let data = try call.bytes("data")
        return try privateKey(query, usage: "sign", scope: scope).sign(data, algorithm: algorithm)
    }

    /// Needs no flag: verification uses only the public key, which anyone may have.
    public func verify(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> Bool {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.signingAlgorithm()
        let data = try call.bytes("data")
        let signature = try call.bytes("signature")
        let key = try privateKey(query, usage: nil, scope: scope)
        return try PublicKeyVerifier.verify(signature, of: data, publicKey: key.publicKey, type: key.type, algorithm: algorithm)
    }

    /// Needs the key's drve flag.
    public func agree(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> SecretBytes {
        let call = KeyCallParameters(parameters)
        guard case .string(let name)? = parameters["algorithm"], let algorithm = KeyAgreementAlgorithm(rawValue: name) else {
            throw KeychainError(.param, "algorithm must be one of \(KeyAgreementAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let peer = try call.bytes("peer")
        var size: Int?
        if let value = parameters["requestedSize"] {
            guard case .int(let n) = value, n > 0, n <= 1 << 16 else { throw KeychainError(.param, "requestedSize must be a number of bytes from 1 to 65536") }
            size = Int(n)
        }
        let sharedInfo = parameters["sharedInfo"] == nil ? [] : try call.bytes("sharedInfo")
        return try privateKey(query, usage: "drve", scope: scope)
            .agree(with: peer, algorithm: algorithm, requestedSize: size, sharedInfo: sharedInfo)
    }
}

/// The parameters dictionary of a key call (docs/protocol.md): named values, checked here.
struct KeyCallParameters {
    let values: AttributeDictionary

    init(_ values: AttributeDictionary) { self.values = values }

    func signingAlgorithm() throws(KeychainError) -> KeySigningAlgorithm {
        guard case .string(let name)? = values["algorithm"], let algorithm = KeySigningAlgorithm(rawValue: name) else {
            throw KeychainError(.param, "algorithm must be one of \(KeySigningAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return algorithm
    }

    /// A data parameter; data that is not secret (messages, signatures, public keys).
    func bytes(_ name: String) throws(KeychainError) -> [UInt8] {
        guard case .data(let d)? = values[name] else { throw KeychainError(.param, "the call needs \(name) as data") }
        return Array(d)
    }
}
