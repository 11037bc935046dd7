import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import KeychainModel

/// ECIES on P-256 computed the way Apple's Security framework computes it for
/// SecKeyCreateEncryptedData with the kSecKeyAlgorithmECIESEncryption…X963SHA256AESGCM
/// algorithms (SecKeyAdaptors.m), so ciphertexts cross between keychaind and Apple devices:
///
/// 1. a fresh ephemeral P-256 key per message;
/// 2. ECDH of the ephemeral private key and the recipient's public key (the x coordinate);
/// 3. ANSI X9.63 KDF with SHA-256 over that secret, with the ephemeral public key (65-byte
///    uncompressed point) as sharedInfo: 16 bytes of AES key, followed by 16 bytes of IV for
///    the VariableIV forms; the older forms take the same 16-byte key and an all-zero IV;
/// 4. AES-128-GCM with that 16-byte IV, no associated data, a 16-byte tag.
///
/// The result is ephemeral public key ‖ ciphertext ‖ tag. Every decryption failure is
/// errSecParam, Apple's code for it ("ECIES: Failed to aes-gcm decrypt data").
public enum P256ECIES {
    /// ANSI X9.63 uncompressed point, Apple's SecKeyCopyExternalRepresentation of a public key.
    public static let publicKeyBytes = 65
    /// The public point followed by the 32-byte scalar, Apple's form of a private key.
    public static let privateKeyBytes = 97
    static let aesKeyBytes = 16
    static let ivBytes = 16
    static let tagBytes = 16
    /// Ephemeral public key plus tag: what a ciphertext adds to its plaintext.
    public static let overheadBytes = publicKeyBytes + tagBytes

    public static func encrypt(_ plaintext: some ContiguousByteBuffer, to publicKey: [UInt8], derivesIV: Bool) throws(KeychainError) -> [UInt8] {
        try encrypt(plaintext, to: publicKey, derivesIV: derivesIV, ephemeral: P256.KeyAgreement.PrivateKey())
    }

    /// With a given ephemeral private key (97 bytes, Apple's form): only tests pass one, to
    /// reproduce a vector byte for byte. Reusing an ephemeral key would reuse the AES key and IV.
    static func encrypt(_ plaintext: some ContiguousByteBuffer, to publicKey: [UInt8], derivesIV: Bool, ephemeralPrivateKey: [UInt8]) throws(KeychainError) -> [UInt8] {
        try encrypt(plaintext, to: publicKey, derivesIV: derivesIV, ephemeral: privateKey(ephemeralPrivateKey))
    }

    private static func encrypt(_ plaintext: some ContiguousByteBuffer, to publicKey: [UInt8], derivesIV: Bool, ephemeral: P256.KeyAgreement.PrivateKey) throws(KeychainError) -> [UInt8] {
        let recipient = try Self.publicKey(publicKey, role: "recipient's")
        let ephemeralPublic = [UInt8](ephemeral.publicKey.x963Representation)
        let sealed: AES.GCM.SealedBox
        do {
            let (key, iv) = try symmetricKey(ephemeral, recipient, ephemeralPublic: ephemeralPublic, derivesIV: derivesIV)
            sealed = try plaintext.withUnsafeBytes { try AES.GCM.seal($0, using: key, nonce: iv) }
        } catch {
            throw KeychainError(.param, "ECIES: the P-256 key agreement or AES-GCM failed")
        }
        return ephemeralPublic + sealed.ciphertext + sealed.tag
    }

    /// `privateKey` is Apple's 97-byte form. The plaintext comes back in wiped memory.
    public static func decrypt(_ ciphertext: [UInt8], privateKey: some ContiguousByteBuffer, derivesIV: Bool) throws(KeychainError) -> SecretBytes {
        guard ciphertext.count >= overheadBytes else {
            throw KeychainError(.param, "ECIES: a P-256 ciphertext is at least \(overheadBytes) bytes")
        }
        guard let recipient = privateKey.withUnsafeBytes({ validPrivateKey($0) }) else { throw invalidPrivateKey }
        let ephemeralPublic = Array(ciphertext[..<publicKeyBytes])
        let ephemeral = try publicKey(ephemeralPublic, role: "ephemeral")
        var opened: Data
        do {
            let (key, iv) = try symmetricKey(recipient, ephemeral, ephemeralPublic: ephemeralPublic, derivesIV: derivesIV)
            let box = try AES.GCM.SealedBox(
                nonce: iv, ciphertext: ciphertext[publicKeyBytes..<(ciphertext.count - tagBytes)],
                tag: ciphertext[(ciphertext.count - tagBytes)...])
            opened = try AES.GCM.open(box, using: key)
        } catch {
            throw KeychainError(.param, "ECIES: the ciphertext does not open with this key (wrong key or altered bytes)")
        }
        let plaintext = SecretBytes(opened)
        // Data is not wiped on release; clear this, the only copy outside SecretBytes.
        opened.resetBytes(in: 0..<opened.count)
        return plaintext
    }

    /// The AES key and IV both sides derive: X9.63 KDF with SHA-256, sharedInfo = ephemeral
    /// public key. The KDF's output is a stream, so the legacy forms' 16-byte key is the first
    /// half of the VariableIV forms' 32 bytes.
    private static func symmetricKey(_ mine: P256.KeyAgreement.PrivateKey, _ theirs: P256.KeyAgreement.PublicKey,
                                     ephemeralPublic: [UInt8], derivesIV: Bool) throws -> (SymmetricKey, AES.GCM.Nonce) {
        let secret = try mine.sharedSecretFromKeyAgreement(with: theirs)
        let derived = secret.x963DerivedSymmetricKey(
            using: SHA256.self, sharedInfo: ephemeralPublic, outputByteCount: aesKeyBytes + (derivesIV ? ivBytes : 0))
        return try derived.withUnsafeBytes { raw in
            let key = SymmetricKey(data: UnsafeRawBufferPointer(rebasing: raw[..<aesKeyBytes]))
            let iv = derivesIV
                ? try AES.GCM.Nonce(data: UnsafeRawBufferPointer(rebasing: raw[aesKeyBytes...]))
                : try AES.GCM.Nonce(data: [UInt8](repeating: 0, count: ivBytes))
            return (key, iv)
        }
    }

    private static func publicKey(_ bytes: [UInt8], role: String) throws(KeychainError) -> P256.KeyAgreement.PublicKey {
        // Only the uncompressed form: Apple writes nothing else, and a fixed length is what
        // tells where the ephemeral key ends in a ciphertext.
        guard bytes.count == publicKeyBytes, bytes.first == 0x04,
              let key = try? P256.KeyAgreement.PublicKey(x963Representation: bytes) else {
            throw KeychainError(.param, "ECIES: the \(role) public key is not an uncompressed P-256 point")
        }
        return key
    }

    private static func privateKey(_ bytes: [UInt8]) throws(KeychainError) -> P256.KeyAgreement.PrivateKey {
        guard let key = validPrivateKey(bytes) else { throw invalidPrivateKey }
        return key
    }

    private static func validPrivateKey(_ bytes: some ContiguousBytes & Collection) -> P256.KeyAgreement.PrivateKey? {
        guard bytes.count == privateKeyBytes else { return nil }
        return try? P256.KeyAgreement.PrivateKey(x963Representation: bytes)
    }

    private static var invalidPrivateKey: KeychainError {
        KeychainError(.param, "ECIES: a P-256 private key is the \(privateKeyBytes)-byte X9.63 form")
    }
}
