import Testing
import KeychainCrypto
import KeychainModel

@Suite struct ItemSealerTests {
    let classKey = SecureKey.random()
    let identity = Array("genp|ak|TEAM.app|row-0001".utf8)
    let plaintext = Array("the secret and its attributes".utf8)

    private func openStatus(_ blob: [UInt8], identity: [UInt8]? = nil, key: SecureKey? = nil) -> KeychainStatus? {
        thrownStatus { () throws(KeychainError) in
            try ItemSealer.open(blob, identity: identity ?? self.identity, classKey: key ?? classKey)
        }
    }

    @Test func sealThenOpenReturnsThePlaintext() throws {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        #expect(try ItemSealer.open(blob, identity: identity, classKey: classKey) == plaintext)
    }

    @Test func emptyPlaintextRoundTrips() throws {
        let blob = ItemSealer.seal([], identity: identity, classKey: classKey)
        #expect(try ItemSealer.open(blob, identity: identity, classKey: classKey) == [])
    }

    @Test func blobStartsWithFormatVersionOneAndHasTheDocumentedSize() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        #expect(blob.first == 1)
        let wrappedItemKey = AEAD.nonceBytes + SecureKey.byteCount + AEAD.tagBytes
        #expect(blob.count == 1 + wrappedItemKey + AEAD.nonceBytes + plaintext.count + AEAD.tagBytes)
    }

    @Test func sealingTwiceGivesDifferentBlobs() {
        #expect(ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
                != ItemSealer.seal(plaintext, identity: identity, classKey: classKey))
    }

    @Test func openWithAnAlteredIdentityIsDecode() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        #expect(openStatus(blob, identity: flipping(identity, at: 0)) == .decode)
        #expect(openStatus(blob, identity: flipping(identity, at: identity.count - 1, bit: 7)) == .decode)
        #expect(openStatus(blob, identity: identity + [0]) == .decode)
        #expect(openStatus(blob, identity: Array(identity.dropLast())) == .decode)
        #expect(openStatus(blob, identity: []) == .decode)
    }

    @Test func openWithAnyAlteredBlobByteIsDecode() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        for index in blob.indices {
            #expect(openStatus(flipping(blob, at: index, bit: index % 8)) == .decode, "byte \(index)")
        }
    }

    @Test func openWithTheWrongClassKeyIsDecode() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        #expect(openStatus(blob, key: SecureKey.random()) == .decode)
    }

    @Test func openOfATruncatedBlobIsDecode() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        for length in [0, 1, 73, 112, 113, blob.count - 1] {
            #expect(openStatus(Array(blob.prefix(length))) == .decode, "\(length) bytes")
        }
    }

    @Test func openOfABlobWithExtraBytesIsDecode() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        #expect(openStatus(blob + [0]) == .decode)
    }

    @Test func ciphertextSpliceFromAnotherItemIsDecode() {
        // Same identity and key: the item key of one blob must not open the body of another.
        let a = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        let b = ItemSealer.seal(plaintext, identity: identity, classKey: classKey)
        let header = 1 + AEAD.nonceBytes + SecureKey.byteCount + AEAD.tagBytes
        let spliced = Array(a.prefix(header)) + Array(b.dropFirst(header))
        #expect(openStatus(spliced) == .decode)
    }
}

@Suite struct LookupHasherTests {
    let deviceKey = SecureKey.random()

    @Test func publicKeyHashAndApplicationLabelOfTheSameBytesHashEqual() {
        let hasher = LookupHasher(deviceKey: deviceKey)
        let keyID = (0..<20).map { UInt8($0) }
        #expect(hasher.hash(attribute: "pkhh", bytes: keyID) == hasher.hash(attribute: "klbl", bytes: keyID))
    }

    @Test func accountAndServiceOfTheSameBytesDiffer() {
        let hasher = LookupHasher(deviceKey: deviceKey)
        let value = Array("alice".utf8)
        #expect(hasher.hash(attribute: "acct", bytes: value) != hasher.hash(attribute: "svce", bytes: value))
    }

    @Test func hashIsDeterministicAcrossHasherInstances() {
        let value = Array("alice".utf8)
        #expect(LookupHasher(deviceKey: deviceKey).hash(attribute: "acct", bytes: value)
                == LookupHasher(deviceKey: deviceKey).hash(attribute: "acct", bytes: value))
    }

    @Test func hashDependsOnTheDeviceKey() {
        let value = Array("alice".utf8)
        #expect(LookupHasher(deviceKey: deviceKey).hash(attribute: "acct", bytes: value)
                != LookupHasher(deviceKey: SecureKey.random()).hash(attribute: "acct", bytes: value))
    }

    @Test func hashDependsOnTheValue() {
        let hasher = LookupHasher(deviceKey: deviceKey)
        #expect(hasher.hash(attribute: "acct", bytes: Array("alice".utf8)) != hasher.hash(attribute: "acct", bytes: Array("alicf".utf8)))
        #expect(hasher.hash(attribute: "acct", bytes: []) != hasher.hash(attribute: "acct", bytes: [0]))
    }

    @Test func hashIsSixteenBytes() {
        #expect(LookupHasher(deviceKey: deviceKey).hash(attribute: "labl", bytes: [1]).count == 16)
    }

    @Test func hashIsNotThePlainKeyedHashUnderTheDeviceKey() {
        let value = Array("alice".utf8)
        let hash = LookupHasher(deviceKey: deviceKey).hash(attribute: "acct", bytes: value)
        #expect(hash != KeyedHash.hash(Array("acct".utf8) + [0] + value, key: deviceKey))
        #expect(hash != KeyedHash.hash(value, key: deviceKey))
    }

}

/// Access-control constraints (issue 29): sealed in the header, authenticated by both layers.
@Suite struct ConstrainedItemSealerTests {
    let classKey = SecureKey.random()
    let identity = Array("genp|ak|TEAM.app|row-0001".utf8)
    let plaintext = Array("the secret and its attributes".utf8)

    private func openStatus(_ blob: [UInt8]) -> KeychainStatus? {
        thrownStatus { () throws(KeychainError) in try ItemSealer.open(blob, identity: identity, classKey: classKey) }
    }

    @Test func aConstrainedBlobOpensAndNamesItsFlags() throws {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey, accessFlags: 1)
        #expect(blob.first == 2)
        #expect(ItemSealer.accessFlags(of: blob) == 1)
        #expect(try ItemSealer.open(blob, identity: identity, classKey: classKey) == plaintext)
        #expect(ItemSealer.accessFlags(of: ItemSealer.seal(plaintext, identity: identity, classKey: classKey)) == 0)
    }

    @Test func droppingTheConstraintLeavesABlobThatOpensForNobody() {
        let blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey, accessFlags: 1)
        #expect(openStatus([1] + blob.dropFirst(5)) == .decode)
    }

    @Test func changingTheConstraintLeavesABlobThatOpensForNobody() {
        var blob = ItemSealer.seal(plaintext, identity: identity, classKey: classKey, accessFlags: 1)
        blob[4] = 16
        #expect(openStatus(blob) == .decode)
        blob[4] = 0
        #expect(openStatus(blob) == .decode)
    }
}
