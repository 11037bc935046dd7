import CSodium
import Crypto
import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Encryption with keys in the real daemon through KeychainKey and the CLI (docs/keys.md,
/// Encryption). Each direction is checked against an implementation outside keychaind:
/// swift-crypto composed by hand into Apple's ECIES, and libsodium's own sealed boxes.
@Suite("Key encryption through the daemon", .serialized)
struct KeyEncryptionTests {
    let message = bytes("meet at the usual place")

    /// Apple's ECIES (SecKeyAdaptors.m) spelled out with swift-crypto: ECDH, X9.63 KDF with
    /// SHA-256 over the ephemeral point, AES-128-GCM with a 16-byte IV from the KDF or zero.
    static func appleECIESKey(_ secret: SharedSecret, ephemeral: [UInt8], derivesIV: Bool) throws -> (SymmetricKey, AES.GCM.Nonce) {
        let derived = secret.x963DerivedSymmetricKey(using: SHA256.self, sharedInfo: ephemeral, outputByteCount: 32)
            .withUnsafeBytes { Array($0) }
        return (SymmetricKey(data: derived.prefix(16)),
                try AES.GCM.Nonce(data: derivesIV ? Array(derived.suffix(16)) : [UInt8](repeating: 0, count: 16)))
    }

    static func appleECIESEncrypt(_ plaintext: [UInt8], to publicKey: [UInt8], derivesIV: Bool) throws -> [UInt8] {
        let ephemeral = P256.KeyAgreement.PrivateKey()
        let point = Array(ephemeral.publicKey.x963Representation)
        let secret = try ephemeral.sharedSecretFromKeyAgreement(with: .init(x963Representation: publicKey))
        let (key, iv) = try appleECIESKey(secret, ephemeral: point, derivesIV: derivesIV)
        let box = try AES.GCM.seal(plaintext, using: key, nonce: iv)
        return point + box.ciphertext + box.tag
    }

    static func appleECIESDecrypt(_ ciphertext: [UInt8], privateKey: [UInt8], derivesIV: Bool) throws -> [UInt8] {
        let point = Array(ciphertext.prefix(65))
        let secret = try P256.KeyAgreement.PrivateKey(x963Representation: privateKey)
            .sharedSecretFromKeyAgreement(with: .init(x963Representation: point))
        let (key, iv) = try appleECIESKey(secret, ephemeral: point, derivesIV: derivesIV)
        let box = try AES.GCM.SealedBox(nonce: iv, ciphertext: ciphertext[65..<(ciphertext.count - 16)], tag: ciphertext.suffix(16))
        return Array(try AES.GCM.open(box, using: key))
    }

    /// An extractable key's stored bytes, read back as SecItemCopyMatching allows.
    static func privateBytes(_ key: KeychainKey, _ c: KeychainConnection) throws -> [UInt8] {
        guard case .single(.data(let bytes)) = try c.copyMatching(["v_PersistentRef": .data(key.persistentRef), "r_Data": .bool(true)]) else {
            throw KeychainError(.decode, "no key bytes")
        }
        return Array(bytes)
    }

    @Test(arguments: [KeyEncryptionAlgorithm.eciesEncryptionCofactorVariableIVX963SHA256AESGCM, .eciesEncryptionStandardX963SHA256AESGCM])
    func aP256KeysCiphertextOpensWithSwiftCryptoAndTheReverse(_ algorithm: KeyEncryptionAlgorithm) throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.p256, label: "p", extractable: true, connection: c)
        let ciphertext = try key.encrypt(SecretBytes(message), algorithm: algorithm)
        #expect(try Self.appleECIESDecrypt(ciphertext, privateKey: Self.privateBytes(key, c), derivesIV: algorithm.derivesIV) == message)
        let theirs = try Self.appleECIESEncrypt(message, to: key.publicKey, derivesIV: algorithm.derivesIV)
        #expect(Array(try key.decrypt(theirs, algorithm: algorithm)) == message)
    }

    @Test func anX25519KeysSealedBoxesAreLibsodiumsBothWays() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.x25519, label: "x", extractable: true, connection: c)
        let ciphertext = try key.encrypt(SecretBytes(message))
        var opened = [UInt8](repeating: 0, count: ciphertext.count - 48)
        #expect(crypto_box_seal_open(&opened, ciphertext, UInt64(ciphertext.count), key.publicKey, try Self.privateBytes(key, c)) == 0)
        #expect(opened == message)
        var sealed = [UInt8](repeating: 0, count: message.count + 48)
        #expect(crypto_box_seal(&sealed, message, UInt64(message.count), key.publicKey) == 0)
        #expect(Array(try key.decrypt(sealed)) == message)
    }

    @Test func aTamperedCiphertextIsErrSecParamAndTheDaemonGoesOn() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.p256, label: "p", connection: c)
        var ciphertext = try key.encrypt(SecretBytes(message))
        ciphertext[70] ^= 1
        #expect(throws: KeychainError(.param, "")) { _ = try key.decrypt(ciphertext) }
        #expect(throws: KeychainError(.param, "")) { _ = try key.decrypt(Array(ciphertext.prefix(80))) }
        #expect(throws: KeychainError(.param, "")) { _ = try key.decrypt([]) }
        let other = try KeychainKey.generate(.p256, label: "q", connection: c)
        #expect(throws: KeychainError(.param, "")) { _ = try other.decrypt(try key.encrypt(SecretBytes(message))) }
        #expect(Array(try key.decrypt(try key.encrypt(SecretBytes(message)))) == message)
    }

    @Test func anEd25519KeyDoesNotEncrypt() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.ed25519, label: "e", connection: c)
        #expect(throws: KeychainError(.param, "")) { _ = try key.encrypt(SecretBytes(message)) }
        #expect(throws: KeychainError(.param, "")) { _ = try key.encrypt(SecretBytes(message), algorithm: .sealedBoxX25519XSalsa20Poly1305) }
    }

    @Test func whileLockedAKeyIsEncryptedToButDoesNotDecrypt() throws {
        let d = try RunningDaemon(config: "lock_grace_seconds = 0")
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try KeychainKey.generate(.x25519, label: "x", connection: c)
        try c.setPasscode(bytes("1234"))
        try c.lock()
        let ciphertext = try key.encrypt(SecretBytes(message))
        #expect(throws: KeychainError(.interactionNotAllowed, "")) { _ = try key.decrypt(ciphertext) }
        try c.unlock(passcode: bytes("1234"))
        #expect(Array(try key.decrypt(ciphertext)) == message)
    }

    @Test func theCLIEncryptsAndDecryptsThroughPipes() throws {
        let d = try RunningDaemon()
        for (type, algorithm) in [("p256", nil), ("p256", "ecies-zero-iv"), ("x25519", "sealed-box")] {
            let label = "\(type)-\(algorithm ?? "default")"
            #expect(try d.cli(["key", "generate", "--type", type, "--label", label]).status == Exit.success)
            let choice = algorithm.map { ["--algorithm", $0] } ?? []
            let encrypted = try d.cli(["key", "encrypt", "--label", label] + choice, input: message)
            #expect(encrypted.status == Exit.success, "\(encrypted.stderr)")
            #expect(encrypted.stdout.count == message.count + (type == "p256" ? 81 : 48))
            let decrypted = try d.cli(["key", "decrypt", "--label", label] + choice, input: encrypted.stdout)
            #expect(decrypted.status == Exit.success, "\(decrypted.stderr)")
            #expect(decrypted.stdout == message)
        }
        let wrong = try d.cli(["key", "decrypt", "--label", "x25519-sealed-box"], input: [UInt8](repeating: 7, count: 60))
        #expect(wrong.status != Exit.success && !wrong.stderr.isEmpty)
    }
}
