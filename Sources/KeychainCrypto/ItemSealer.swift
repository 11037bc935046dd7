import KeychainModel

/// Seals one item's plaintext under a fresh per-item key IK, and IK under the class key of
/// the item's protection domain. Both layers authenticate `identity` (the row's class, pdmn,
/// access group, persistent id and lookup columns), so a ciphertext moved to another row, or a
/// row whose pdmn, access group or key columns were edited, fails to open.
///
///     blob = header || seal(IK, classKey, aad) || seal(plaintext, IK, aad)
///     aad  = "keychaind/v1/item" || header || identity
///
/// The header is 0x01 for an item without access-control constraints, and 0x02 followed by
/// the constraint flags (big-endian u32) for one with them (issue 29): the flags are read
/// without opening the blob, and both layers authenticate them, so an edit that drops or
/// changes them (back to a 0x01 header, say) leaves a blob that opens for nobody.
public enum ItemSealer {
    static let formatVersion: UInt8 = 1
    static let constrainedFormatVersion: UInt8 = 2
    static let wrappedKeyBytes = AEAD.nonceBytes + SecureKey.byteCount + AEAD.tagBytes

    public static func seal(_ plaintext: some ContiguousByteBuffer, identity: [UInt8], classKey: SecureKey,
                            accessFlags: UInt32 = 0) -> [UInt8] {
        var itemKey = Sodium.randomBytes(SecureKey.byteCount)
        defer { Sodium.wipe(&itemKey) }
        return seal(plaintext, identity: identity, classKey: classKey, itemKey: itemKey,
                    keyNonce: Sodium.randomBytes(AEAD.nonceBytes), dataNonce: Sodium.randomBytes(AEAD.nonceBytes),
                    accessFlags: accessFlags)
    }

    /// The constraint flags a blob's header names (0 for a 0x01 header). Unauthenticated
    /// until `open` succeeds on the same blob.
    public static func accessFlags(of blob: [UInt8]) -> UInt32 {
        guard blob.count >= 5, blob[0] == constrainedFormatVersion else { return 0 }
        return UInt32(blob[1]) << 24 | UInt32(blob[2]) << 16 | UInt32(blob[3]) << 8 | UInt32(blob[4])
    }

    static func header(accessFlags: UInt32) -> [UInt8] {
        guard accessFlags != 0 else { return [formatVersion] }
        return [constrainedFormatVersion, UInt8(accessFlags >> 24), UInt8(truncatingIfNeeded: accessFlags >> 16),
                UInt8(truncatingIfNeeded: accessFlags >> 8), UInt8(truncatingIfNeeded: accessFlags)]
    }

    /// The blob for a given item key and nonces: how golden-vector tests (@testable) pin the
    /// format byte for byte. The product always seals with random ones, above.
    static func seal(_ plaintext: some ContiguousByteBuffer, identity: [UInt8], classKey: SecureKey,
                     itemKey: [UInt8], keyNonce: [UInt8], dataNonce: [UInt8], accessFlags: UInt32 = 0) -> [UInt8] {
        let header = header(accessFlags: accessFlags)
        let aad = associatedData(header: header, identity)
        var blob: [UInt8] = header
        blob += AEAD.seal(itemKey, associatedData: aad, key: classKey, nonce: keyNonce)
        blob += AEAD.seal(plaintext, associatedData: aad, rawKey: itemKey, nonce: dataNonce)
        return blob
    }

    /// The plaintext (in wiped memory), or errSecDecode.
    public static func open(_ blob: [UInt8], identity: [UInt8], classKey: SecureKey) throws(KeychainError) -> SecretBytes {
        guard let format = blob.first, format == formatVersion || format == constrainedFormatVersion else {
            throw KeychainError(.decode, "item blob format \(blob.first.map { "\($0)" } ?? "(empty)") is unknown")
        }
        let headerBytes = format == formatVersion ? 1 : 5
        guard blob.count >= headerBytes + wrappedKeyBytes + AEAD.nonceBytes + AEAD.tagBytes else {
            throw KeychainError(.decode, "item blob is too short")
        }
        let header = Array(blob[0..<headerBytes])
        // A 0x02 header without constraints is never written.
        guard format == formatVersion || accessFlags(of: blob) != 0 else { throw KeychainError(.decode, "item blob has an empty constraint") }
        let aad = associatedData(header: header, identity)
        guard let itemKey = AEAD.open(Array(blob[headerBytes..<(headerBytes + wrappedKeyBytes)]), associatedData: aad, key: classKey) else {
            throw KeychainError(.decode, "item key does not unwrap: the row was altered or moved")
        }
        guard let plaintext = AEAD.open(Array(blob[(headerBytes + wrappedKeyBytes)...]), associatedData: aad, rawKey: itemKey) else {
            throw KeychainError(.decode, "item ciphertext does not verify: the row was altered")
        }
        return plaintext
    }

    static func associatedData(_ identity: [UInt8]) -> [UInt8] {
        associatedData(header: [formatVersion], identity)
    }

    static func associatedData(header: [UInt8], _ identity: [UInt8]) -> [UInt8] {
        Array("keychaind/v1/item".utf8) + header + identity
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
