import Testing
import KeychainCrypto
import KeychainModel

@Suite struct AEADTests {
    let key = SecureKey.random()
    let plaintext = Array("correct horse battery staple".utf8)
    let aad = Array("row identity".utf8)

    @Test func sealThenOpenReturnsThePlaintext() {
        let sealed = AEAD.seal(plaintext, associatedData: aad, key: key)
        #expect(AEAD.open(sealed, associatedData: aad, key: key) == plaintext)
    }

    @Test func sealedFormIsNonceCiphertextTag() {
        let sealed = AEAD.seal(plaintext, associatedData: aad, key: key)
        #expect(AEAD.nonceBytes == 24)
        #expect(AEAD.tagBytes == 16)
        #expect(sealed.count == 24 + plaintext.count + 16)
    }

    @Test func ciphertextDoesNotContainThePlaintext() {
        let sealed = AEAD.seal(plaintext, associatedData: aad, key: key)
        let body = Array(sealed[AEAD.nonceBytes..<(AEAD.nonceBytes + plaintext.count)])
        #expect(body != plaintext)
    }

    @Test func sealingTwiceUsesDifferentNonces() {
        let a = AEAD.seal(plaintext, associatedData: aad, key: key)
        let b = AEAD.seal(plaintext, associatedData: aad, key: key)
        #expect(a.prefix(AEAD.nonceBytes) != b.prefix(AEAD.nonceBytes))
        #expect(a != b)
    }

    @Test func openWithTheWrongKeyFails() {
        let sealed = AEAD.seal(plaintext, associatedData: aad, key: key)
        #expect(AEAD.open(sealed, associatedData: aad, key: SecureKey.random()) == nil)
    }

    @Test func openFailsWhenAnyByteIsAltered() {
        let sealed = AEAD.seal(plaintext, associatedData: aad, key: key)
        for i in sealed.indices {
            #expect(AEAD.open(flipping(sealed, at: i, bit: i % 8), associatedData: aad, key: key) == nil, "byte \(i)")
        }
    }

    @Test func openFailsWhenTheAssociatedDataIsAltered() {
        let sealed = AEAD.seal(plaintext, associatedData: aad, key: key)
        #expect(AEAD.open(sealed, associatedData: flipping(aad, at: 0), key: key) == nil)
        #expect(AEAD.open(sealed, associatedData: aad + [0], key: key) == nil)
        #expect(AEAD.open(sealed, associatedData: [], key: key) == nil)
    }

    @Test func emptyPlaintextRoundTrips() {
        let sealed = AEAD.seal([], associatedData: aad, key: key)
        #expect(sealed.count == AEAD.nonceBytes + AEAD.tagBytes)
        #expect(AEAD.open(sealed, associatedData: aad, key: key) == [])
    }

    @Test func emptyPlaintextIsStillAuthenticated() {
        let sealed = AEAD.seal([], associatedData: aad, key: key)
        #expect(AEAD.open(sealed, associatedData: [], key: key) == nil)
        #expect(AEAD.open(flipping(sealed, at: sealed.count - 1), associatedData: aad, key: key) == nil)
    }

    @Test func emptyAssociatedDataRoundTrips() {
        let sealed = AEAD.seal(plaintext, associatedData: [], key: key)
        #expect(AEAD.open(sealed, associatedData: [], key: key) == plaintext)
    }

    @Test func inputShorterThanNonceAndTagFails() {
        let sealed = AEAD.seal([], associatedData: aad, key: key)
        for length in 0..<sealed.count {
            #expect(AEAD.open(Array(sealed.prefix(length)), associatedData: aad, key: key) == nil)
        }
    }

    @Test func rawKeyAndSecureKeyWithTheSameBytesInteroperate() {
        let raw = bytes(of: key)
        let sealed = AEAD.seal(plaintext, associatedData: aad, rawKey: raw)
        #expect(AEAD.open(sealed, associatedData: aad, key: key) == plaintext)
        let sealed2 = AEAD.seal(plaintext, associatedData: aad, key: key)
        #expect(AEAD.open(sealed2, associatedData: aad, rawKey: raw) == plaintext)
    }
}

@Suite struct SecureKeyTests {
    @Test func takingWipesTheSourceArray() {
        var source = (1...32).map { UInt8($0) }
        _ = SecureKey.taking(&source)
        #expect(source.count == 32)
        #expect(source.allSatisfy { $0 == 0 })
    }

    @Test func takingKeepsTheBytesInTheKey() {
        let original = (1...32).map { UInt8($0 * 7 & 0xFF) }
        var source = original
        let key = SecureKey.taking(&source)
        #expect(bytes(of: key) == original)
    }

    @Test func randomKeysDiffer() {
        #expect(bytes(of: SecureKey.random()) != bytes(of: SecureKey.random()))
    }

    @Test func randomKeyIsThirtyTwoBytes() {
        #expect(SecureKey.byteCount == 32)
        #expect(bytes(of: SecureKey.random()).count == 32)
    }

    @Test func deriveIsDeterministic() {
        let master = SecureKey.random()
        #expect(bytes(of: master.derive(id: 1, context: "keybag__")) == bytes(of: master.derive(id: 1, context: "keybag__")))
    }

    @Test func deriveGivesDifferentKeysForDifferentIds() {
        let master = SecureKey.random()
        #expect(bytes(of: master.derive(id: 1, context: "keybag__")) != bytes(of: master.derive(id: 2, context: "keybag__")))
    }

    @Test func deriveGivesDifferentKeysForDifferentContexts() {
        let master = SecureKey.random()
        #expect(bytes(of: master.derive(id: 1, context: "keybag__")) != bytes(of: master.derive(id: 1, context: "lookup__")))
    }

    @Test func deriveGivesDifferentKeysForDifferentMasters() {
        #expect(bytes(of: SecureKey.random().derive(id: 1, context: "keybag__"))
                != bytes(of: SecureKey.random().derive(id: 1, context: "keybag__")))
    }

    @Test func derivedKeyIsNotTheMasterKey() {
        let master = SecureKey.random()
        #expect(bytes(of: master.derive(id: 0, context: "keybag__")) != bytes(of: master))
    }

    @Test func hashToKeyIsDeterministicAndMessageDependent() {
        let key = SecureKey.random()
        #expect(bytes(of: key.hashToKey([1, 2, 3])) == bytes(of: key.hashToKey([1, 2, 3])))
        #expect(bytes(of: key.hashToKey([1, 2, 3])) != bytes(of: key.hashToKey([1, 2, 4])))
        #expect(bytes(of: key.hashToKey([1, 2, 3])) != bytes(of: SecureKey.random().hashToKey([1, 2, 3])))
    }
}

@Suite struct KeyedHashTests {
    @Test func hashIsDeterministic() {
        let key = SecureKey.random()
        #expect(KeyedHash.hash([1, 2, 3], key: key) == KeyedHash.hash([1, 2, 3], key: key))
    }

    @Test func hashDependsOnTheKey() {
        #expect(KeyedHash.hash([1, 2, 3], key: SecureKey.random()) != KeyedHash.hash([1, 2, 3], key: SecureKey.random()))
    }

    @Test func hashDependsOnTheMessage() {
        let key = SecureKey.random()
        #expect(KeyedHash.hash([1, 2, 3], key: key) != KeyedHash.hash([1, 2, 3, 0], key: key))
        #expect(KeyedHash.hash([], key: key) != KeyedHash.hash([0], key: key))
    }

    @Test(arguments: [16, 32, 64])
    func hashHasTheRequestedLength(length: Int) {
        #expect(KeyedHash.hash([9], key: SecureKey.random(), outputBytes: length).count == length)
    }

    @Test func defaultLengthIsSixteenBytes() {
        #expect(KeyedHash.hash([9], key: SecureKey.random()).count == 16)
    }
}

@Suite struct SodiumTests {
    @Test func wipeZeroesTheBuffer() {
        var buffer: [UInt8] = [1, 2, 3, 4]
        Sodium.wipe(&buffer)
        #expect(buffer == [0, 0, 0, 0])
    }

    @Test func randomBytesHaveTheRequestedLengthAndDiffer() {
        let a = Sodium.randomBytes(32)
        #expect(a.count == 32)
        #expect(a != Sodium.randomBytes(32))
    }

    @Test func constantTimeEqualComparesContentAndLength() {
        #expect(Sodium.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!Sodium.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        #expect(!Sodium.constantTimeEqual([1, 2, 3], [1, 2]))
        #expect(Sodium.constantTimeEqual([], []))
    }
}

@Suite struct PasswordKDFTests {
    let salt = [UInt8](repeating: 0x11, count: Argon2Parameters.saltBytes)
    let params = Argon2Parameters.testingOnly

    private func derive(_ passcode: String, salt: [UInt8]) throws -> [UInt8] {
        bytes(of: try PasswordKDF.derive(passcode: Array(passcode.utf8), salt: salt, parameters: params))
    }

    @Test func testingParametersAreValid() {
        #expect(Argon2Parameters.testingOnly.isValid)
        #expect(Argon2Parameters.standard.isValid)
    }

    @Test func saltIsSixteenBytes() {
        #expect(Argon2Parameters.saltBytes == 16)
    }

    @Test func sameSaltAndPasscodeGiveTheSameKey() throws {
        #expect(try derive("1234", salt: salt) == derive("1234", salt: salt))
    }

    @Test func differentSaltGivesADifferentKey() throws {
        #expect(try derive("1234", salt: salt) != derive("1234", salt: flipping(salt, at: 0)))
    }

    @Test func differentPasscodeGivesADifferentKey() throws {
        #expect(try derive("1234", salt: salt) != derive("1235", salt: salt))
    }

    @Test func differentCostGivesADifferentKey() throws {
        let a = try PasswordKDF.derive(passcode: [1], salt: salt, parameters: params)
        let costlier = Argon2Parameters(opsLimit: params.opsLimit + 1, memLimitBytes: params.memLimitBytes)
        let b = try PasswordKDF.derive(passcode: [1], salt: salt, parameters: costlier)
        #expect(bytes(of: a) != bytes(of: b))
    }

    @Test func emptyPasscodeIsParam() {
        #expect(thrownStatus { () throws(KeychainError) in
            try PasswordKDF.derive(passcode: [], salt: salt, parameters: params)
        } == .param)
    }

    @Test(arguments: [
        Argon2Parameters(opsLimit: 0, memLimitBytes: 8 << 10),
        Argon2Parameters(opsLimit: 65, memLimitBytes: 8 << 10),
        Argon2Parameters(opsLimit: 1, memLimitBytes: 1024),
        Argon2Parameters(opsLimit: 1, memLimitBytes: (4 << 30) + 1),
    ])
    func outOfRangeParametersAreParam(parameters: Argon2Parameters) {
        #expect(!parameters.isValid)
        #expect(thrownStatus { () throws(KeychainError) in
            try PasswordKDF.derive(passcode: [1], salt: salt, parameters: parameters)
        } == .param)
    }

    @Test(arguments: [0, 15, 17, 32])
    func saltOfTheWrongLengthIsDecode(length: Int) {
        #expect(thrownStatus { () throws(KeychainError) in
            try PasswordKDF.derive(passcode: [1], salt: [UInt8](repeating: 1, count: length), parameters: params)
        } == .decode)
    }
}
