import KeychainCrypto
import KeychainModel
import KeychainStorage

/// Encryption with keychain keys (docs/keys.md, Encryption; docs/protocol.md, ops 29 and 30).
extension ItemStore {
    /// Encrypts `data` to the public half of the key the query finds. Needs no usage flag (Apple
    /// puts kSecAttrCanEncrypt on the public key, which anyone holding it may use). With a
    /// `publicKey` parameter the class key is not needed either: the key must only be visible
    /// to the caller, which its row's columns tell (klbl is the public key's SHA-1), so a
    /// when-unlocked key can still be encrypted to while the keychain is locked.
    public func encrypt(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> [UInt8] {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.encryptionAlgorithm()
        let plaintext = try call.secret("data")
        if parameters["publicKey"] != nil {
            let publicKey = try call.bytes("publicKey")
            guard publicKey.count == algorithm.keyType.publicKeyBytes else {
                throw KeychainError(.param, "\(algorithm.rawValue) needs a \(algorithm.keyType.rawValue) public key of \(algorithm.keyType.publicKeyBytes) bytes, not \(publicKey.count)")
            }
            try requireVisibleKey(query, publicKey: publicKey, type: algorithm.keyType, scope: scope)
            return try PublicKeyEncryptor.encrypt(plaintext, to: publicKey, type: algorithm.keyType, algorithm: algorithm)
        }
        let key = try privateKey(query, usage: nil, scope: scope)
        return try PublicKeyEncryptor.encrypt(plaintext, to: key.publicKey, type: key.type, algorithm: algorithm)
    }

    /// Decrypts with the private key the query finds: needs its decr flag and its class key.
    /// Every failed decryption (wrong key, altered or truncated ciphertext) is errSecParam.
    public func decrypt(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> SecretBytes {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.encryptionAlgorithm()
        let ciphertext = try call.bytes("data")
        return try privateKey(query, usage: "decr", scope: scope).decrypt(ciphertext, algorithm: algorithm)
    }

    /// errSecItemNotFound unless the query finds, in the caller's groups, a private key of
    /// `type` whose public key is `publicKey`. Only the rows' column hashes are read when the
    /// query names columns alone; other attributes need the items opened (and their class key).
    private func requireVisibleKey(_ dict: AttributeDictionary, publicKey: [UInt8], type: KeyType, scope: AccessScope) throws(KeychainError) {
        var queryDict = dict
        queryDict["class"] = .string(ItemClass.key.rawValue)
        let parsed = try ItemQuery(queryDict, for: .copyMatching)
        let groups = try scope.groups(naming: parsed.accessGroup)
        var plan = plan(.key, attributes: parsed.attributes, groups: groups, query: parsed)
        let schema = ClassSchema.key
        // Added to the filter rather than the query: a persistent reference may not be joined
        // by attributes in a query, but the row it names must still be this key.
        plan.filter.hashes.append(("kcls", codec.hash(schema.spec("kcls")!, .int(Self.privateKeyClass))))
        plan.filter.hashes.append(("klbl", codec.hash(schema.spec("klbl")!, .data(SecretBytes(PrivateKey.applicationLabel(of: publicKey))))))
        // The type is checked on the match, not filtered on: a key of another type is
        // errSecParam ("algorithm not supported by the key"), as when the key is opened.
        let typeHash = codec.hash(schema.spec("type")!, .int(type.attributeNumber))
        var found: ItemRow?
        if plan.needsOpening {
            let (items, corrupt) = try find(plan, limit: 1, withAttributes: true)
            guard let item = items.first else { throw Self.nothingFound(corrupt: corrupt) }
            found = item.row
        } else {
            try table.forEach(plan.filter) { row in
                found = row
                return false
            }
        }
        guard let row = found else { throw KeychainError(.itemNotFound, "no private key with this public key matches the query") }
        guard row.hashes["type"] == typeHash else {
            throw KeychainError(.param, "algorithm not supported by the key: it is not a \(type.rawValue) key")
        }
    }
}

extension KeyCallParameters {
    public func encryptionAlgorithm() throws(KeychainError) -> KeyEncryptionAlgorithm {
        guard case .string(let name)? = values["algorithm"], let algorithm = KeyEncryptionAlgorithm(rawValue: name) else {
            throw KeychainError(.param, "algorithm must be one of \(KeyEncryptionAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return algorithm
    }

    /// A data parameter that may be secret (a plaintext): kept in wiped memory.
    public func secret(_ name: String) throws(KeychainError) -> SecretBytes {
        guard case .data(let d)? = values[name] else { throw KeychainError(.param, "the call needs \(name) as data") }
        return d
    }
}
