import KeychainCrypto
import KeychainModel

/// The rules of `keys` items (docs/keys.md): the attributes Apple gives a SecKey, filled on
/// import, fixed once stored, and the non-extractable rule.
enum KeyItem {
    /// What a private key's import derives from its bytes and its extr: sizes, application
    /// label (a certificate's pkhh matches it), sensitivity and permanence.
    static let derived = ["bsiz", "esiz", "klbl", "sens", "asen", "next", "perm", "priv"]

    /// Attributes that are facts about the key's bytes, or its history: fixed once the key is
    /// stored (an update that names them with another value is refused).
    static let fixed = Set(derived + ["kcls", "type", sealedPublicKey])

    /// keychaind's own attribute of a private key sealed under an application password: its
    /// public key, derived on add, so that the public key's uses (export, verify, encrypt to
    /// it) and key listings need no password, as Apple's SecKeyCopyPublicKey needs none.
    static let sealedPublicKey = "xpub"

    /// kSecAttrKeyClass of a private key.
    static let privateKeyClass: Int64 = 1

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
    /// attributes Apple derives for a SecKey (`derived`, under the one rule of
    /// `DerivedAttributes`: a value the caller gives must be the derived one); any other keys
    /// item is stored as given.
    static func fill(_ attributes: inout AttributeDictionary, data: SecretBytes?) throws(KeychainError) {
        guard attributes["kcls"] == .int(privateKeyClass), let typeValue = attributes["type"],
              case .int(let number) = typeValue, let type = KeyType(attributeNumber: number) else { return }
        guard let data else {
            throw KeychainError(.param, "a \(type.rawValue) private key needs its bytes in v_Data (or generate one with the key-generate call)")
        }
        let key = try PrivateKey(type: type, bytes: data)
        let extractable = attributes["extr"].map { $0 == .int(1) } ?? false
        let sensitive: AttributeValue = .int(extractable ? 0 : 1)
        let values: AttributeDictionary = [
            "bsiz": .int(type.bits), "esiz": .int(type.bits), "klbl": .data(key.applicationLabel),
            "sens": sensitive, "asen": sensitive, "next": sensitive, "perm": .int(1), "priv": .int(1),
        ]
        try DerivedAttributes.check(attributes, against: values, codes: derived, schema: .key, source: "the key")
        attributes.merge(values) { _, new in new }
        if AccessControl.needsApplicationPassword(AccessControl.storedFlags(attributes)) {
            let publicKey: AttributeValue = .data(SecretBytes(key.publicKey))
            if let given = attributes[sealedPublicKey], given != publicKey {
                throw KeychainError(.param, "\(sealedPublicKey) is the key's public key, derived by keychaind: give none or that one")
            }
            attributes[sealedPublicKey] = publicKey
        } else if attributes[sealedPublicKey] != nil {
            throw KeychainError(.param, "\(sealedPublicKey) is keychaind's own, for a key sealed under an application password only")
        }
        attributes["extr"] = .int(extractable ? 1 : 0)
        attributes["modi"] = attributes["modi"] ?? .int(1)
        for (flag, on) in usage(of: type) where attributes[flag] == nil {
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

    static let usageName = ["sign": "kSecAttrCanSign (sign)", "drve": "kSecAttrCanDerive (drve)", "decr": "kSecAttrCanDecrypt (decr)"]

    // MARK: the non-extractable rule

    /// A stored private key whose bytes never leave the daemon: extr is 0. Keys items from
    /// before keychaind held keys carry no extr and are returned as they always were.
    static func isSealed(_ item: StoredItem) -> Bool {
        item.itemClass == .key && item.attributes["extr"] == .int(0)
    }

    /// Whether a query's items must be decoded for the non-extractable rule: a keys item's
    /// data cannot be handed out before its extr is known.
    static func needsAttributes(_ query: ItemQuery) -> Bool {
        query.itemClass == .key && query.returnData
    }

    /// Refuses an update that would change what a stored key is or let its bytes out.
    static func checkChange(_ item: StoredItem, _ changes: ItemChanges) throws(KeychainError) {
        guard item.itemClass == .key, item.attributes["extr"] != nil,
              item.attributes["kcls"] == .int(privateKeyClass),
              case .int(let number)? = item.attributes["type"], KeyType(attributeNumber: number) != nil else { return }
        if item.attributes["extr"] == .int(0), let extr = changes.attributes["extr"], extr != .int(0) {
            throw KeychainError(.param, "a non-extractable key cannot be made extractable")
        }
        for code in changes.attributes.keys where fixed.contains(code) {
            if changes.attributes[code] != item.attributes[code] {
                throw KeychainError(.param, "\(code) is derived from the key's bytes or history and cannot change")
            }
        }
        if changes.data != nil {
            throw KeychainError(.param, "a stored key's bytes cannot change: delete it and import the new key")
        }
    }
}
