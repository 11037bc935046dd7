import KeychainModel

/// Seals one item's plaintext under a fresh per-item key IK, and IK under the class key of
/// the item's protection domain. Both layers authenticate `identity` (the row's class, pdmn,
/// access group, persistent id and lookup columns), so a ciphertext moved to another row, or a
/// row whose pdmn, access group or key columns were edited, fails to open.
///
///     blob = 0x01 || seal(IK, classKey, aad) || seal(plaintext, IK, aad)
///     aad  = "keychaind/v1/item" || 0x01 || identity
public enum ItemSealer {
    static let formatVersion: UInt8 = 1
    static let wrappedKeyBytes = AEAD.nonceBytes + SecureKey.byteCount + AEAD.tagBytes

    public static func seal(_ plaintext: some ContiguousByteBuffer, identity: [UInt8], classKey: SecureKey) -> [UInt8] {
        var itemKey = Sodium.randomBytes(SecureKey.byteCount)
        defer { Sodium.wipe(&itemKey) }
        return seal(plaintext, identity: identity, classKey: classKey, itemKey: itemKey,
                    keyNonce: Sodium.randomBytes(AEAD.nonceBytes), dataNonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    /// The blob for a given item key and nonces: how golden-vector tests (@testable) pin the
    /// format byte for byte. The product always seals with random ones, above.
    static func seal(_ plaintext: some ContiguousByteBuffer, identity: [UInt8], classKey: SecureKey,
                     itemKey: [UInt8], keyNonce: [UInt8], dataNonce: [UInt8]) -> [UInt8] {
        let aad = associatedData(identity)
        var blob: [UInt8] = [formatVersion]
        blob += AEAD.seal(itemKey, associatedData: aad, key: classKey, nonce: keyNonce)
        blob += AEAD.seal(plaintext, associatedData: aad, rawKey: itemKey, nonce: dataNonce)
        return blob
    }

    /// The plaintext (in wiped memory), or errSecDecode.
    public static func open(_ blob: [UInt8], identity: [UInt8], classKey: SecureKey) throws(KeychainError) -> SecretBytes {
        guard blob.count >= 1 + wrappedKeyBytes + AEAD.nonceBytes + AEAD.tagBytes else {
            throw KeychainError(.decode, "item blob is too short")
        }
        guard blob[0] == formatVersion else {
            throw KeychainError(.decode, "item blob format \(blob[0]) is unknown")
        }
        let aad = associatedData(identity)
        guard let itemKey = AEAD.open(Array(blob[1..<(1 + wrappedKeyBytes)]), associatedData: aad, key: classKey) else {
            throw KeychainError(.decode, "item key does not unwrap: the row was altered or moved")
        }
        guard let plaintext = AEAD.open(Array(blob[(1 + wrappedKeyBytes)...]), associatedData: aad, rawKey: itemKey) else {
            throw KeychainError(.decode, "item ciphertext does not verify: the row was altered")
        }
        return plaintext
    }

    static func associatedData(_ identity: [UInt8]) -> [UInt8] {
        Array("keychaind/v1/item".utf8) + [formatVersion] + identity
    }
}

/// Keyed hashes for the lookup columns: a stolen database lists no service, account or label
/// in clear. The key is derived from the device key; each attribute hashes under its own
/// domain so equal values in different columns do not link up, except the certificate's
/// public-key hash and the key's application label, which must match for the identity join.
public struct LookupHasher: Sendable {
    private let key: SecureKey

    public init(deviceKey: SecureKey) {
        key = deviceKey.derive(id: 2, context: "lookup__")
    }

    public func hash(attribute code: String, bytes: [UInt8]) -> [UInt8] {
        let domain = (code == "pkhh" || code == "klbl") ? "keyid" : code
        return KeyedHash.hash(domain: domain, bytes, key: key, outputBytes: 16)
    }

    /// A Secret Service attribute index row's hash. Its domains hold a '-', so they never
    /// equal an attribute code (four letters) or a code's "#number" domain.
    public func hash(secretServiceDomain domain: String, message: [UInt8]) -> [UInt8] {
        precondition(domain.contains("-"))
        return KeyedHash.hash(domain: domain, message, key: key, outputBytes: 16)
    }
}
