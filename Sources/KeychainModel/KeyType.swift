/// The asymmetric key types keychaind generates and uses inside the daemon (docs/keys.md).
/// Shared by daemon and client: the client names a type, the daemon holds the key.
public enum KeyType: String, Sendable, CaseIterable, Hashable {
    case ed25519, x25519, p256

    /// kSecAttrKeyType as the `type` attribute holds it: Apple's kSecAttrKeyTypeECSECPrimeRandom
    /// (73) for P-256; 105 and 106 are the numbers Apple's own tables give Ed25519 and X25519
    /// (shared/reference/keychain-semantics.md 1.7), which SecKey.h does not publish.
    public var attributeNumber: Int64 {
        switch self {
        case .ed25519: 105
        case .x25519: 106
        case .p256: 73
        }
    }

    public init?(attributeNumber: Int64) {
        guard let type = Self.allCases.first(where: { $0.attributeNumber == attributeNumber }) else { return nil }
        self = type
    }

    /// kSecAttrKeySizeInBits (and the effective size): the curve's size; 256 for the two
    /// 25519 keys, whose scalars and points are 32 bytes (Apple does not document a figure).
    public var bits: Int64 { 256 }

    /// Bytes of the private key as it is imported and stored: a raw 32-byte Ed25519 seed or
    /// X25519 scalar; for P-256 Apple's form, the X9.63 public point then the scalar.
    public var privateKeyBytes: Int {
        switch self {
        case .ed25519, .x25519: 32
        case .p256: 97
        }
    }

    /// Bytes of the public key: raw 32 bytes, or P-256's uncompressed X9.63 point.
    public var publicKeyBytes: Int {
        switch self {
        case .ed25519, .x25519: 32
        case .p256: 65
        }
    }

    /// What the key can do: signatures, key agreement, or both.
    public var signs: Bool { self != .x25519 }
    public var agrees: Bool { self != .ed25519 }
}

/// kSecKeyAlgorithm names for signatures, as the wire carries them.
public enum KeySigningAlgorithm: String, Sendable, CaseIterable, Hashable {
    /// Ed25519 over the whole message (RFC 8032): Apple has no SecKey constant, so keychaind
    /// names it in Apple's style.
    case ed25519 = "algid:sign:EdDSA:message-Ed25519"
    /// kSecKeyAlgorithmECDSASignatureMessageX962SHA256: SHA-256 of the message, DER signature.
    case ecdsaMessageX962SHA256 = "algid:sign:ECDSA:message-X962:SHA256"
    /// kSecKeyAlgorithmECDSASignatureDigestX962SHA256: the caller's 32-byte SHA-256 digest.
    case ecdsaDigestX962SHA256 = "algid:sign:ECDSA:digest-X962:SHA256"

    /// The key type the algorithm needs.
    public var keyType: KeyType {
        switch self {
        case .ed25519: .ed25519
        case .ecdsaMessageX962SHA256, .ecdsaDigestX962SHA256: .p256
        }
    }
}

/// kSecKeyAlgorithm names for key agreement. The ECDH names serve X25519 as well.
public enum KeyAgreementAlgorithm: String, Sendable, CaseIterable, Hashable {
    /// kSecKeyAlgorithmECDHKeyExchangeStandard: the raw shared secret (P-256's x coordinate,
    /// X25519's output).
    case standard = "algid:keyexchange:ECDH"
    /// kSecKeyAlgorithmECDHKeyExchangeStandardX963SHA256: the shared secret through the ANSI
    /// X9.63 KDF with SHA-256, `requestedSize` bytes, with optional `sharedInfo`.
    case standardX963SHA256 = "algid:keyexchange:ECDH:KDFX963:SHA256"
}
