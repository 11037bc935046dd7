/// An encryption algorithm of a keychain key, named by the string that travels on the wire.
/// The ECIES names are the values of Apple's kSecKeyAlgorithm constants (SecKey.h), so a
/// ciphertext made by SecKeyCreateEncryptedData on a Mac or iPhone opens here and the reverse.
/// P-256 has cofactor 1, so each Cofactor algorithm computes exactly what its Standard twin does;
/// both names are accepted because Apple code uses both.
public enum KeyEncryptionAlgorithm: String, Sendable, CaseIterable, Hashable, CustomStringConvertible {
    /// AES-GCM with a 16-byte IV taken from the X9.63 KDF output: what Apple recommends.
    case eciesEncryptionStandardVariableIVX963SHA256AESGCM = "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM-KDFIV"
    case eciesEncryptionCofactorVariableIVX963SHA256AESGCM = "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM-KDFIV"
    /// Apple's legacy form: the same key, but an all-zero 16-byte IV. Safe only because every
    /// message has its own ephemeral key; kept for data made by older Apple code.
    case eciesEncryptionStandardX963SHA256AESGCM = "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM"
    case eciesEncryptionCofactorX963SHA256AESGCM = "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM"
    /// libsodium's sealed box (crypto_box_seal) to an X25519 key. Apple defines no encryption
    /// with X25519 keys, so this name is keychaind's own; it keeps Apple's "algid:encrypt:" shape
    /// so that one parser reads every name.
    case sealedBoxX25519XSalsa20Poly1305 = "algid:encrypt:X25519:SealedBox"

    /// Whether the AES-GCM IV comes from the KDF (the VariableIV forms) rather than being zero.
    public var derivesIV: Bool {
        switch self {
        case .eciesEncryptionStandardVariableIVX963SHA256AESGCM, .eciesEncryptionCofactorVariableIVX963SHA256AESGCM: true
        case .eciesEncryptionStandardX963SHA256AESGCM, .eciesEncryptionCofactorX963SHA256AESGCM, .sealedBoxX25519XSalsa20Poly1305: false
        }
    }

    /// The key type the algorithm needs.
    public var keyType: KeyType { self == .sealedBoxX25519XSalsa20Poly1305 ? .x25519 : .p256 }

    public var description: String { rawValue }
}
