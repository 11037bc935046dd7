import Crypto
import KeychainModel

/// Encryption to a key's public half: needs only public bytes, so the daemon can do it for a
/// key whose class key is locked (docs/keys.md, Encryption).
public enum PublicKeyEncryptor {
    /// `plaintext` sealed to `publicKey` (a `type` key) with `algorithm`. errSecParam when the
    /// algorithm is not for this key type or the public key is malformed.
    public static func encrypt(_ plaintext: some ContiguousByteBuffer, to publicKey: [UInt8], type: KeyType,
                               algorithm: KeyEncryptionAlgorithm) throws(KeychainError) -> [UInt8] {
        try checkKeyType(type, algorithm)
        switch algorithm {
        case .sealedBoxX25519XSalsa20Poly1305:
            return try X25519SealedBox.seal(plaintext, to: publicKey)
        default:
            return try P256ECIES.encrypt(plaintext, to: publicKey, derivesIV: algorithm.derivesIV)
        }
    }

    static func checkKeyType(_ type: KeyType, _ algorithm: KeyEncryptionAlgorithm) throws(KeychainError) {
        guard algorithm.keyType == type else {
            throw KeychainError(.param, "\(algorithm.rawValue): algorithm not supported by a \(type.rawValue) key")
        }
    }
}

extension PrivateKey {
    /// Opens a ciphertext made for this key's public half; the plaintext in wiped memory.
    /// errSecParam for an algorithm of another key type and for every failed decryption.
    public func decrypt(_ ciphertext: [UInt8], algorithm: KeyEncryptionAlgorithm) throws(KeychainError) -> SecretBytes {
        try PublicKeyEncryptor.checkKeyType(type, algorithm)
        switch algorithm {
        case .sealedBoxX25519XSalsa20Poly1305:
            return try X25519SealedBox.open(ciphertext, privateKey: bytes)
        default:
            return try P256ECIES.decrypt(ciphertext, privateKey: bytes, derivesIV: algorithm.derivesIV)
        }
    }
}

extension PrivateKey {
    /// kSecAttrApplicationLabel (`klbl`) of a public key: its SHA-1, the value a key with that
    /// public half carries. Lets the daemon find a key by public key without opening its item.
    public static func applicationLabel(of publicKey: [UInt8]) -> [UInt8] {
        Array(Insecure.SHA1.hash(data: publicKey))
    }
}
