@testable import KeychainCrypto
import KeychainModel
import Testing

/// Bytes from a hex string (whitespace ignored); for the fixed vectors below.
private func hex(_ text: String) -> [UInt8] {
    let digits = Array(text.filter { !$0.isWhitespace })
    precondition(digits.count % 2 == 0)
    return stride(from: 0, to: digits.count, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! }
}

/// One ECIES ciphertext with the private key that opens it.
struct ECIESVector: CustomTestStringConvertible, Sendable {
    let name: String
    /// Apple's 97-byte form: X9.63 public point ‖ scalar.
    let privateKey: [UInt8]
    let derivesIV: Bool
    let ciphertext: [UInt8]
    let plaintext: [UInt8]
    /// The ephemeral private key, where the vector's maker published it: then the encryption
    /// itself must reproduce the ciphertext byte for byte.
    let ephemeralPrivateKey: [UInt8]?

    var testDescription: String { name }
    var publicKey: [UInt8] { Array(privateKey.prefix(P256ECIES.publicKeyBytes)) }

    /// Made on an Apple device by SecKeyCreateEncryptedData with
    /// .eciesEncryptionCofactorVariableIVX963SHA256AESGCM, published in jedda/ECIES
    /// (github.com/jedda/ECIES, ecies_test.go, TestExternalDecryptSuccess, case
    /// "P256-SHA256-VIV"; the plaintext is the case's name). The key there is a SEC1 DER
    /// private key; here it is rewritten in Apple's X9.63 form (the same point and scalar).
    static let apple = ECIESVector(
        name: "Apple, VariableIV (jedda/ECIES)",
        privateKey: hex("""
            04ce0158c3746a73bd882181d5ec91fa336e399ff9cb9f1cab7b503bb1ce673addf56727c940b5c6b38758d1c8209dedbcb9e5c7203e652b3d49342858e3d34762
            71a1c67a6ede41bf9d6e68cc3649f934c542f2fa3329c2710583ea31d5e29d14
            """),
        derivesIV: true,
        ciphertext: hex("""
            048eac0421b27fdd7a190495dc31cebe61713a6cdb57da6ad3cc1c39d29a7a93f6fd0b5ea63f4cef57589335dfe8ea88b2d0f2c952317e700c7d4a71673a021c36
            da958473cf086a1f083b2ba44d975176f4f55d2cdb491f8f7cc8949f9685bf
            """),
        plaintext: Array("P256-SHA256-VIV".utf8),
        ephemeralPrivateKey: nil)

    /// Made independently with pyca/cryptography 48 (OpenSSL: ECDH, X963KDF, AESGCM) following
    /// SecKeyAdaptors.m; scalars are SHA-256 of "keychaind ecies recipient" / "... ephemeral".
    /// No Apple-made vector for the SHA-256 zero-IV form was found; this pins the key/IV split.
    static let independentZeroIV = ECIESVector(
        name: "pyca/cryptography, zero IV",
        privateKey: recipientKey,
        derivesIV: false,
        ciphertext: hex("""
            0452188c748f9fe4c6a0375a8384694772ddefce2dbf64eecfd2a18e430663817a2ed54bb38ef97b88d3195d6e5578c8547593ddd3530ea7fbb4de8e7e3131c75c
            2bb0cc50405874543b29f5ec09128f4bfce27f6ebf45ce48eece4103ee659ae558ed799e3eb9d36c5ee338b9a04d
            """),
        plaintext: Array("sealed to a P-256 key, zero IV".utf8),
        ephemeralPrivateKey: ephemeralKey)

    static let independentVariableIV = ECIESVector(
        name: "pyca/cryptography, VariableIV",
        privateKey: recipientKey,
        derivesIV: true,
        ciphertext: hex("""
            0452188c748f9fe4c6a0375a8384694772ddefce2dbf64eecfd2a18e430663817a2ed54bb38ef97b88d3195d6e5578c8547593ddd3530ea7fbb4de8e7e3131c75c
            1966296aeb522558a83de0a640d2d26f3746d4f8f8209facbf4dbf9f9de15a78f44193e0562959d0efd9fcba4baca2fd32
            """),
        plaintext: Array("sealed to a P-256 key, derived IV".utf8),
        ephemeralPrivateKey: ephemeralKey)

    static let recipientKey = hex("""
        04e746e36b1cf05362a3a31a3c9d60b16ae21e17b808f3df7e00c05ecd7c667f1cf6b4fc95cf26972b256d784671e6877e75e0ffb6666b52548d95673fd9dac5fe
        e8a8c04934ea70a97c9c19c9bd7363555bf3579cae842312cc11a9ac81f8f692
        """)
    static let ephemeralKey = hex("""
        0452188c748f9fe4c6a0375a8384694772ddefce2dbf64eecfd2a18e430663817a2ed54bb38ef97b88d3195d6e5578c8547593ddd3530ea7fbb4de8e7e3131c75c
        e1c5815a7b7a42266001149242397502e54ce0b631f863f4c4bd96b7c9bd0f3c
        """)

    static let all = [apple, independentZeroIV, independentVariableIV]
}

@Suite struct P256ECIESTests {
    let key = ECIESVector.recipientKey
    var publicKey: [UInt8] { Array(key.prefix(65)) }
    let message = Array("meet at the usual place".utf8)

    @Test(arguments: ECIESVector.all)
    func decryptsTheVector(_ vector: ECIESVector) throws {
        let opened = try P256ECIES.decrypt(vector.ciphertext, privateKey: vector.privateKey, derivesIV: vector.derivesIV)
        #expect(opened == vector.plaintext)
    }

    @Test(arguments: ECIESVector.all.filter { $0.ephemeralPrivateKey != nil })
    func encryptionWithTheVectorsEphemeralKeyReproducesItsBytes(_ vector: ECIESVector) throws {
        let sealed = try P256ECIES.encrypt(vector.plaintext, to: vector.publicKey, derivesIV: vector.derivesIV,
                                           ephemeralPrivateKey: vector.ephemeralPrivateKey!)
        #expect(sealed == vector.ciphertext)
    }

    @Test(arguments: [true, false])
    func encryptThenDecryptReturnsThePlaintext(derivesIV: Bool) throws {
        let sealed = try P256ECIES.encrypt(message, to: publicKey, derivesIV: derivesIV)
        #expect(try P256ECIES.decrypt(sealed, privateKey: key, derivesIV: derivesIV) == message)
    }

    @Test func ciphertextIsEphemeralPointThenCiphertextThenTag() throws {
        let sealed = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        #expect(sealed.count == 65 + message.count + 16)
        #expect(sealed[0] == 0x04)
        #expect(Array(sealed[65..<(65 + message.count)]) != message)
    }

    @Test func everyMessageHasItsOwnEphemeralKey() throws {
        let a = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        let b = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        #expect(a.prefix(65) != b.prefix(65))
        #expect(a.dropFirst(65) != b.dropFirst(65))
    }

    @Test func emptyPlaintextRoundTripsAndIsAuthenticated() throws {
        let sealed = try P256ECIES.encrypt([UInt8](), to: publicKey, derivesIV: true)
        #expect(sealed.count == P256ECIES.overheadBytes)
        #expect(try P256ECIES.decrypt(sealed, privateKey: key, derivesIV: true).isEmpty)
        #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(flipping(sealed, at: 70), privateKey: key, derivesIV: true) } == .param)
    }

    @Test func decryptingWithAnotherKeyIsErrSecParam() throws {
        let sealed = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(sealed, privateKey: ECIESVector.apple.privateKey, derivesIV: true) } == .param)
    }

    @Test func anyAlteredByteIsErrSecParam() throws {
        let sealed = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        for i in sealed.indices {
            #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(flipping(sealed, at: i, bit: i % 8), privateKey: key, derivesIV: true) } == .param,
                    "byte \(i)")
        }
    }

    @Test func truncatedCiphertextsAreErrSecParam() throws {
        let sealed = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        for length in 0..<sealed.count {
            #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(Array(sealed.prefix(length)), privateKey: key, derivesIV: true) } == .param,
                    "length \(length)")
        }
    }

    @Test func theZeroIVAndVariableIVFormsDoNotOpenEachOther() throws {
        let variable = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        let zero = try P256ECIES.encrypt(message, to: publicKey, derivesIV: false)
        #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(variable, privateKey: key, derivesIV: false) } == .param)
        #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(zero, privateKey: key, derivesIV: true) } == .param)
    }

    @Test func aPublicKeyThatIsNotAnUncompressedP256PointIsErrSecParam() {
        let compressed = [0x02] + Array(publicKey[1..<33])
        var offCurve = publicKey
        offCurve[64] ^= 1
        for bad in [[], Array(publicKey.prefix(64)), publicKey + [0], compressed, offCurve, [UInt8](repeating: 0, count: 65)] {
            #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.encrypt(message, to: bad, derivesIV: true) } == .param, "\(bad.count) bytes")
        }
    }

    @Test func aPrivateKeyNotInApplesFormIsErrSecParam() throws {
        let sealed = try P256ECIES.encrypt(message, to: publicKey, derivesIV: true)
        for bad in [Array(key.suffix(32)), Array(key.prefix(96)), key + [0]] {
            #expect(thrownStatus { () throws(KeychainError) in try P256ECIES.decrypt(sealed, privateKey: bad, derivesIV: true) } == .param, "\(bad.count) bytes")
        }
    }
}

@Suite struct X25519SealedBoxTests {
    // Scalars are SHA-256 of "keychaind sealed box recipient" / "... stranger"; the public keys
    // were computed with pyca/cryptography's X25519, independently of libsodium.
    let privateKey = hex("68c803575a00d214d002f11d21dbeab6b80025eb87da8fe126024cf30e99f716")
    let publicKey = hex("098a81e4a85b176d546baa7fc08bbfd73b8ad6fc1dd435b734476a8db6e54f61")
    let strangerPrivateKey = hex("919255bdd50d62c505b56491f4c95bfa2c9a684b1483646d03c014980795220d")
    let message = Array("meet at the usual place".utf8)

    @Test func sealThenOpenReturnsThePlaintext() throws {
        let sealed = try X25519SealedBox.seal(message, to: publicKey)
        #expect(try X25519SealedBox.open(sealed, privateKey: SecretBytes(privateKey)) == message)
    }

    @Test func sealedBoxIsEphemeralKeyTagAndCiphertext() throws {
        let sealed = try X25519SealedBox.seal(message, to: publicKey)
        #expect(X25519SealedBox.overheadBytes == 48)
        #expect(sealed.count == 48 + message.count)
        #expect(Array(sealed.suffix(message.count)) != message)
    }

    @Test func everyBoxHasItsOwnEphemeralKey() throws {
        let a = try X25519SealedBox.seal(message, to: publicKey)
        let b = try X25519SealedBox.seal(message, to: publicKey)
        #expect(a.prefix(32) != b.prefix(32))
    }

    @Test func emptyPlaintextRoundTrips() throws {
        let sealed = try X25519SealedBox.seal([UInt8](), to: publicKey)
        #expect(sealed.count == 48)
        #expect(try X25519SealedBox.open(sealed, privateKey: privateKey).isEmpty)
    }

    @Test func openingWithAnotherKeyIsErrSecParam() throws {
        let sealed = try X25519SealedBox.seal(message, to: publicKey)
        #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.open(sealed, privateKey: strangerPrivateKey) } == .param)
    }

    @Test func anyAlteredByteIsErrSecParam() throws {
        let sealed = try X25519SealedBox.seal(message, to: publicKey)
        for i in sealed.indices {
            #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.open(flipping(sealed, at: i, bit: i % 8), privateKey: privateKey) } == .param,
                    "byte \(i)")
        }
    }

    @Test func truncatedBoxesAreErrSecParam() throws {
        let sealed = try X25519SealedBox.seal(message, to: publicKey)
        for length in 0..<sealed.count {
            #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.open(Array(sealed.prefix(length)), privateKey: privateKey) } == .param,
                    "length \(length)")
        }
    }

    @Test func keysOfTheWrongLengthAreErrSecParam() throws {
        #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.seal(message, to: Array(publicKey.prefix(31))) } == .param)
        #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.seal(message, to: publicKey + [0]) } == .param)
        let sealed = try X25519SealedBox.seal(message, to: publicKey)
        #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.open(sealed, privateKey: Array(privateKey.prefix(31))) } == .param)
    }

    @Test func aSmallOrderPublicKeyIsRefused() {
        // The identity point: every shared secret with it is zero.
        #expect(thrownStatus { () throws(KeychainError) in try X25519SealedBox.seal(message, to: [UInt8](repeating: 0, count: 32)) } == .param)
    }
}
