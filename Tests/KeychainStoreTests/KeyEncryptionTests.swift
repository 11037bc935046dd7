import KeychainCrypto
import KeychainModel
import Testing
@testable import KeychainStore
import StoreTestSupport

/// Encryption with keys in the store (docs/keys.md, Encryption): ops 29 and 30 as the store
/// carries them out.
@Suite("Key encryption in the store")
struct KeyEncryptionStoreTests {
    static let message = Array("the launch code is 0000".utf8)
    static let other = AccessScope(groups: ["com.example.other"])

    static func encrypt(_ t: TemporaryStore, _ attrs: AttributeDictionary, _ algorithm: KeyEncryptionAlgorithm,
                        publicKey: [UInt8]? = nil, scope: AccessScope = TemporaryStore.app) throws -> [UInt8] {
        var parameters: AttributeDictionary = ["algorithm": .string(algorithm.rawValue), "data": .data(SecretBytes(message))]
        if let publicKey { parameters["publicKey"] = .data(SecretBytes(publicKey)) }
        return try t.store.keys.encrypt(KeyTests.ref(attrs), parameters: parameters, scope: scope)
    }

    static func decrypt(_ t: TemporaryStore, _ attrs: AttributeDictionary, _ ciphertext: [UInt8],
                        _ algorithm: KeyEncryptionAlgorithm) throws -> SecretBytes {
        try t.store.keys.decrypt(KeyTests.ref(attrs), parameters: ["algorithm": .string(algorithm.rawValue),
                                                                "data": .data(SecretBytes(ciphertext))], scope: TemporaryStore.app)
    }

    static func publicKey(_ t: TemporaryStore, _ attrs: AttributeDictionary) throws -> [UInt8] {
        try t.store.keys.publicKey(KeyTests.ref(attrs), scope: TemporaryStore.app)
    }

    @Test(arguments: KeyEncryptionAlgorithm.allCases)
    func encryptThenDecryptReturnsThePlaintext(_ algorithm: KeyEncryptionAlgorithm) throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, algorithm.keyType)
        let ciphertext = try Self.encrypt(t, attrs, algorithm)
        #expect(ciphertext.count == Self.message.count + (algorithm.keyType == .p256 ? 81 : 48))
        #expect(Array(try Self.decrypt(t, attrs, ciphertext, algorithm)) == Self.message)
    }

    @Test func theCiphertextOpensWithTheStoredKeyBytes() throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, .p256)
        let ciphertext = try Self.encrypt(t, attrs, .eciesEncryptionCofactorVariableIVX963SHA256AESGCM)
        let opened = try P256ECIES.decrypt(ciphertext, privateKey: try KeyTests.storedBytes(t, attrs), derivesIV: true)
        #expect(Array(opened) == Self.message)
    }

    @Test func decryptionNeedsTheDecryptFlag() throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, .x25519, ["decr": .int(0)])
        let ciphertext = try Self.encrypt(t, attrs, .sealedBoxX25519XSalsa20Poly1305)
        expectStatus(.param) { _ = try Self.decrypt(t, attrs, ciphertext, .sealedBoxX25519XSalsa20Poly1305) }
    }

    @Test func anAlgorithmOfAnotherKeyTypeIsErrSecParam() throws {
        let t = try TemporaryStore()
        let p256 = try KeyTests.generate(t, .p256, label: "p")
        let x25519 = try KeyTests.generate(t, .x25519, label: "x")
        let ed25519 = try KeyTests.generate(t, .ed25519, label: "e")
        expectStatus(.param) { _ = try Self.encrypt(t, p256, .sealedBoxX25519XSalsa20Poly1305) }
        expectStatus(.param) { _ = try Self.encrypt(t, x25519, .eciesEncryptionStandardVariableIVX963SHA256AESGCM) }
        expectStatus(.param) { _ = try Self.encrypt(t, ed25519, .sealedBoxX25519XSalsa20Poly1305) }
        expectStatus(.param) { _ = try Self.decrypt(t, ed25519, [UInt8](repeating: 0, count: 100), .sealedBoxX25519XSalsa20Poly1305) }
        expectStatus(.param) {
            _ = try t.store.keys.encrypt(KeyTests.ref(p256), parameters: ["algorithm": .string("algid:encrypt:RSA:OAEP:SHA256"),
                                                                     "data": .data([1])], scope: TemporaryStore.app)
        }
    }

    @Test(arguments: [KeyEncryptionAlgorithm.eciesEncryptionCofactorVariableIVX963SHA256AESGCM, .sealedBoxX25519XSalsa20Poly1305])
    func aTamperedOrTruncatedCiphertextIsErrSecParam(_ algorithm: KeyEncryptionAlgorithm) throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, algorithm.keyType)
        let ciphertext = try Self.encrypt(t, attrs, algorithm)
        for i in [0, 1, 40, ciphertext.count - 20, ciphertext.count - 1] {
            var altered = ciphertext
            altered[i] ^= 0x80
            expectStatus(.param) { _ = try Self.decrypt(t, attrs, altered, algorithm) }
        }
        expectStatus(.param) { _ = try Self.decrypt(t, attrs, Array(ciphertext.dropLast()), algorithm) }
        expectStatus(.param) { _ = try Self.decrypt(t, attrs, [], algorithm) }
    }

    @Test func anotherKeysCiphertextIsErrSecParam() throws {
        let t = try TemporaryStore()
        let mine = try KeyTests.generate(t, .p256, label: "mine")
        let theirs = try KeyTests.generate(t, .p256, label: "theirs")
        let ciphertext = try Self.encrypt(t, theirs, .eciesEncryptionStandardX963SHA256AESGCM)
        expectStatus(.param) { _ = try Self.decrypt(t, mine, ciphertext, .eciesEncryptionStandardX963SHA256AESGCM) }
    }

    @Test func withItsPublicKeyAWhenUnlockedKeyIsEncryptedToWhileLocked() throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, .p256)
        let publicKey = try Self.publicKey(t, attrs)
        try t.store.setPasscode(bytes("1234"))
        t.store.lock()
        let algorithm = KeyEncryptionAlgorithm.eciesEncryptionCofactorVariableIVX963SHA256AESGCM
        let ciphertext = try Self.encrypt(t, attrs, algorithm, publicKey: publicKey)
        expectStatus(.interactionNotAllowed) { _ = try Self.encrypt(t, attrs, algorithm) }
        expectStatus(.interactionNotAllowed) { _ = try Self.decrypt(t, attrs, ciphertext, algorithm) }
        try t.store.unlock(passcode: bytes("1234"))
        #expect(Array(try Self.decrypt(t, attrs, ciphertext, algorithm)) == Self.message)
    }

    @Test func aPublicKeyThatIsNotTheQueriedKeysIsNotFound() throws {
        let t = try TemporaryStore()
        let mine = try KeyTests.generate(t, .x25519, label: "mine")
        let theirs = try KeyTests.generate(t, .x25519, label: "theirs")
        let theirPublicKey = try Self.publicKey(t, theirs)
        expectStatus(.itemNotFound) { _ = try Self.encrypt(t, mine, .sealedBoxX25519XSalsa20Poly1305, publicKey: theirPublicKey) }
        let byLabel: AttributeDictionary = ["labl": .string("mine")]
        expectStatus(.itemNotFound) {
            _ = try t.store.keys.encrypt(byLabel, parameters: ["algorithm": .string(KeyEncryptionAlgorithm.sealedBoxX25519XSalsa20Poly1305.rawValue),
                                                          "data": .data([1]), "publicKey": .data(SecretBytes(theirPublicKey))],
                                    scope: TemporaryStore.app)
        }
        expectStatus(.param) {
            _ = try Self.encrypt(t, mine, .sealedBoxX25519XSalsa20Poly1305, publicKey: Array(theirPublicKey.dropLast()))
        }
    }

    @Test func aKeyInAGroupTheCallerLacksIsNotFoundEvenWithItsPublicKey() throws {
        let t = try TemporaryStore()
        let attrs = try KeyTests.generate(t, .p256)
        let publicKey = try Self.publicKey(t, attrs)
        let algorithm = KeyEncryptionAlgorithm.eciesEncryptionCofactorVariableIVX963SHA256AESGCM
        expectStatus(.itemNotFound) { _ = try Self.encrypt(t, attrs, algorithm, publicKey: publicKey, scope: Self.other) }
        expectStatus(.itemNotFound) { _ = try Self.encrypt(t, attrs, algorithm, scope: Self.other) }
    }
}
