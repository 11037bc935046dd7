import CSodium
import Crypto
import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore
import StoreTestSupport

/// Keys inside the store (docs/keys.md): generation fills Apple's attributes, the key calls
/// use the key where it is, and its bytes never come back unless it is extractable.
@Suite("Keys in the store")
struct KeyTests {
    static func generate(_ t: TemporaryStore, _ type: KeyType, label: String = "k", _ extra: AttributeDictionary = [:],
                         scope: AccessScope = TemporaryStore.app) throws -> AttributeDictionary {
        var dict: AttributeDictionary = ["type": .int(type.attributeNumber), "labl": .string(label)]
        dict.merge(extra) { $1 }
        guard case .single(.attributes(let attrs)) = try t.store.keys.generateKey(dict, scope: scope) else {
            throw KeychainError(.decode, "generation answered no attributes")
        }
        return attrs
    }

    static func ref(_ attrs: AttributeDictionary) -> AttributeDictionary { ["v_PersistentRef": attrs["v_PersistentRef"]!] }

    static func sign(_ t: TemporaryStore, _ attrs: AttributeDictionary, _ data: [UInt8], _ algorithm: KeySigningAlgorithm,
                     scope: AccessScope = TemporaryStore.app) throws -> [UInt8] {
        try t.store.keys.sign(ref(attrs), parameters: ["algorithm": .string(algorithm.rawValue), "data": .data(data)], scope: scope)
    }

    /// The bytes the store holds for a key: read the way only a test can, through the store's
    /// own search (the public calls refuse them).
    static func storedBytes(_ t: TemporaryStore, _ attrs: AttributeDictionary) throws -> SecretBytes {
        let query = try ItemQuery(ref(attrs), for: .copyMatching)
        let plan = t.store.items.plan(.key, attributes: [:], groups: TemporaryStore.app.groups, query: query)
        return try #require(try t.store.items.find(plan, limit: 1, withAttributes: true).items.first).data
    }

    @Test(arguments: KeyType.allCases)
    func generationFillsTheAttributesAppleGivesAPrivateKey(_ type: KeyType) throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, type)
        let publicKey = try t.store.keys.publicKey(Self.ref(attrs), scope: TemporaryStore.app)
        #expect(publicKey.count == type.publicKeyBytes)
        #expect(attrs["class"] == nil && attrs["v_Data"] == nil)
        #expect(attrs["kcls"] == .int(1))
        #expect(attrs["type"] == .int(type.attributeNumber))
        #expect(attrs["bsiz"] == .int(256) && attrs["esiz"] == .int(256))
        #expect(attrs["klbl"] == .data(Array(Insecure.SHA1.hash(data: publicKey))))
        #expect(attrs["extr"] == .int(0) && attrs["sens"] == .int(1) && attrs["asen"] == .int(1) && attrs["next"] == .int(1))
        #expect(attrs["perm"] == .int(1) && attrs["priv"] == .int(1))
        #expect(attrs["sign"] == .int(type == .x25519 ? 0 : 1))
        #expect(attrs["drve"] == .int(type == .ed25519 ? 0 : 1))
        #expect(attrs["decr"] == .int(type == .ed25519 ? 0 : 1))
        for flag in ["encr", "vrfy", "wrap", "unwp"] { #expect(attrs[flag] == .int(0), "\(flag)") }
        #expect(attrs["pdmn"] == .string("ak") && attrs["agrp"] == .string("com.example.app"))
        #expect(attrs["labl"] == .string("k"))
    }

    @Test func anExtractableKeyIsNotSensitive() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .ed25519, ["extr": .bool(true)])
        #expect(attrs["extr"] == .int(1) && attrs["sens"] == .int(0) && attrs["asen"] == .int(0) && attrs["next"] == .int(0))
    }

    @Test func anEd25519SignatureVerifiesWithLibsodium() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .ed25519)
        let publicKey = try t.store.keys.publicKey(Self.ref(attrs), scope: TemporaryStore.app)
        let message = bytes("a message to sign")
        let signature = try Self.sign(t, attrs, message, .ed25519)
        #expect(signature.count == 64)
        #expect(crypto_sign_verify_detached(signature, message, UInt64(message.count), publicKey) == 0)
        #expect(crypto_sign_verify_detached(signature, bytes("another"), 7, publicKey) != 0)
    }

    @Test func aP256SignatureVerifiesWithSwiftCrypto() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .p256)
        let publicKey = try P256.Signing.PublicKey(x963Representation: try t.store.keys.publicKey(Self.ref(attrs), scope: TemporaryStore.app))
        let message = bytes("a message to sign")
        let signature = try P256.Signing.ECDSASignature(derRepresentation: try Self.sign(t, attrs, message, .ecdsaMessageX962SHA256))
        #expect(publicKey.isValidSignature(signature, for: message))
        let digest = Array(SHA256.hash(data: message))
        let overDigest = try P256.Signing.ECDSASignature(derRepresentation: try Self.sign(t, attrs, digest, .ecdsaDigestX962SHA256))
        #expect(publicKey.isValidSignature(overDigest, for: message))
    }

    /// A P-256 signature takes the stored point as it is (P256Signer: no second pairwise
    /// check). The point was checked when the key came in; a point changed in the database
    /// file since is refused by the row's AEAD, errSecDecode, before any key is built.
    @Test func aP256KeyWhosePointWasChangedInTheFileIsRefusedBeforeItSigns() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .p256)
        #expect(try !Self.sign(t, attrs, [1], .ecdsaMessageX962SHA256).isEmpty)
        // The data layer's plaintext starts at 1 (header) + 72 (wrapped item key) + 24 (nonce),
        // with the key's 4-byte length first: byte 101 + 40 is in the point (a stream cipher
        // keeps positions), flipped in the file as someone holding it would.
        try t.editFile { db in
            var blob = try db.query("SELECT data FROM items WHERE class = 'keys'") { (s) throws(KeychainError) in
                try s.step() ? s.blob(0) : []
            }
            try #require(blob.count > 141)
            blob[141] ^= 0x01
            try db.run("UPDATE items SET data = ? WHERE class = 'keys'", [.blob(blob)])
        }
        expectStatus(.decode) { _ = try Self.sign(t, attrs, [1], .ecdsaMessageX962SHA256) }
        expectStatus(.decode) { _ = try Self.sign(t, attrs, Array(SHA256.hash(data: [1])), .ecdsaDigestX962SHA256) }
    }

    @Test func theStoreVerifiesItsOwnSignaturesAndRefusesOthers() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .p256)
        let message = bytes("m")
        let signature = try Self.sign(t, attrs, message, .ecdsaMessageX962SHA256)
        let verify = { (data: [UInt8]) throws -> Bool in
            try t.store.keys.verify(Self.ref(attrs), parameters: ["algorithm": .string(KeySigningAlgorithm.ecdsaMessageX962SHA256.rawValue),
                                                              "data": .data(data), "signature": .data(signature)], scope: TemporaryStore.app)
        }
        #expect(try verify(message))
        #expect(try !verify(bytes("n")))
    }

    @Test(arguments: [KeyType.x25519, .p256])
    func agreementEqualsThePeersComputation(_ type: KeyType) throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, type)
        let ours = try t.store.keys.publicKey(Self.ref(attrs), scope: TemporaryStore.app)
        let peerSecret: [UInt8]
        let peerPublic: [UInt8]
        switch type {
        case .x25519:
            let peer = Curve25519.KeyAgreement.PrivateKey()
            peerPublic = Array(peer.publicKey.rawRepresentation)
            peerSecret = try peer.sharedSecretFromKeyAgreement(with: .init(rawRepresentation: ours)).withUnsafeBytes { Array($0) }
        default:
            let peer = P256.KeyAgreement.PrivateKey()
            peerPublic = Array(peer.publicKey.x963Representation)
            peerSecret = try peer.sharedSecretFromKeyAgreement(with: .init(x963Representation: ours)).withUnsafeBytes { Array($0) }
        }
        let shared = try t.store.keys.agree(Self.ref(attrs), parameters: ["algorithm": .string(KeyAgreementAlgorithm.standard.rawValue),
                                                                     "peer": .data(peerPublic)], scope: TemporaryStore.app)
        #expect(Array(shared) == peerSecret)
    }

    @Test func theX963KDFMatchesSwiftCrypto() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .p256)
        let ours = try t.store.keys.publicKey(Self.ref(attrs), scope: TemporaryStore.app)
        let peer = P256.KeyAgreement.PrivateKey()
        let info = bytes("context")
        let expected = try peer.sharedSecretFromKeyAgreement(with: .init(x963Representation: ours))
            .x963DerivedSymmetricKey(using: SHA256.self, sharedInfo: info, outputByteCount: 48).withUnsafeBytes { Array($0) }
        let derived = try t.store.keys.agree(Self.ref(attrs), parameters: [
            "algorithm": .string(KeyAgreementAlgorithm.standardX963SHA256.rawValue), "peer": .data(Array(peer.publicKey.x963Representation)),
            "requestedSize": .int(48), "sharedInfo": .data(info)], scope: TemporaryStore.app)
        #expect(Array(derived) == expected)
    }

    @Test func aUsageFlagThatIsOffRefusesTheOperationWithErrSecParam() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .p256, ["sign": .int(0), "drve": .int(0)])
        expectStatus(.param) { _ = try Self.sign(t, attrs, [1], .ecdsaMessageX962SHA256) }
        expectStatus(.param) {
            _ = try t.store.keys.agree(Self.ref(attrs), parameters: ["algorithm": .string(KeyAgreementAlgorithm.standard.rawValue),
                                                                "peer": .data(Array(P256.KeyAgreement.PrivateKey().publicKey.x963Representation))],
                                  scope: TemporaryStore.app)
        }
    }

    @Test func anAlgorithmOfAnotherKeyTypeIsErrSecParam() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .ed25519)
        expectStatus(.param) { _ = try Self.sign(t, attrs, [1], .ecdsaMessageX962SHA256) }
    }

    @Test func aLockedWhenUnlockedKeyCannotSign() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .ed25519)
        try t.store.setPasscode(bytes("1234"))
        t.store.lock()
        expectStatus(.interactionNotAllowed) { _ = try Self.sign(t, attrs, [1], .ed25519) }
        try t.store.unlock(passcode: bytes("1234"))
        #expect(try Self.sign(t, attrs, [1], .ed25519).count == 64)
    }

    @Test func aKeyInAnotherGroupIsNotFound() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .ed25519)
        let other = AccessScope(groups: ["com.example.other"])
        expectStatus(.itemNotFound) { _ = try Self.sign(t, attrs, [1], .ed25519, scope: other) }
        expectStatus(.itemNotFound) { _ = try t.store.keys.publicKey(["labl": .string("k")], scope: other) }
    }

    @Test func aNonExtractableKeysBytesAreInNoCopyMatchingAnswer() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .ed25519)
        let query: AttributeDictionary = ["class": .string("keys"), "labl": .string("k")]
        expectStatus(.param) { _ = try t.secret(query) }
        var both = query
        both["r_Data"] = .bool(true)
        both["r_Attributes"] = .bool(true)
        guard case .single(.attributes(let answer)) = try t.copy(both) else { Issue.record("no attributes"); return }
        #expect(answer["v_Data"] == nil)
        #expect(answer["klbl"] == attrs["klbl"])
    }

    @Test func anExtractableKeysBytesAreReturned() throws {
        let t = try TemporaryStore()
        let attrs = try Self.generate(t, .x25519, ["extr": .int(1)])
        let secret = try #require(try t.secret(["class": .string("keys"), "labl": .string("k")]))
        #expect(secret == Array(try Self.storedBytes(t, attrs)))
    }

    @Test func aBackupLeavesNonExtractableKeysOut() throws {
        let t = try TemporaryStore()
        _ = try Self.generate(t, .ed25519, label: "sealed")
        _ = try Self.generate(t, .ed25519, label: "open", ["extr": .int(1)])
        let (items, excluded, sealedKeys) = try t.store.backupExporter.migratableItems()
        #expect(items.map { $0["labl"] } == [.string("open")])
        #expect(excluded == 1 && sealedKeys == 1)
    }

    @Test func aNonExtractableKeyCannotBeMadeExtractable() throws {
        let t = try TemporaryStore()
        _ = try Self.generate(t, .ed25519)
        let query: AttributeDictionary = ["class": .string("keys"), "labl": .string("k")]
        expectStatus(.param) { try t.store.items.update(query, changes: ["extr": .int(1)], scope: TemporaryStore.app) }
        expectStatus(.param) { try t.store.items.update(query, changes: ["type": .int(106)], scope: TemporaryStore.app) }
        expectStatus(.param) { try t.store.items.update(query, changes: ["v_Data": .data([UInt8](repeating: 1, count: 32))], scope: TemporaryStore.app) }
        try t.store.items.update(query, changes: ["labl": .string("renamed")], scope: TemporaryStore.app)
        #expect(try t.attributes(["class": .string("keys"), "labl": .string("renamed")])?["extr"] == .int(0))
    }

    @Test func anImportedKeyGetsTheSameAttributesAndSignsLikeTheOriginal() throws {
        let t = try TemporaryStore()
        let original = P256.Signing.PrivateKey()
        let result = try t.add(["class": .string("keys"), "kcls": .int(1), "type": .int(73), "labl": .string("imported"),
                                "v_Data": .data(Array(original.x963Representation)), "r_Attributes": .bool(true), "r_PersistentRef": .bool(true)])
        guard case .single(.attributes(let attrs)) = result else { Issue.record("no attributes"); return }
        #expect(attrs["v_Data"] == nil)
        #expect(attrs["klbl"] == .data(Array(Insecure.SHA1.hash(data: original.publicKey.x963Representation))))
        #expect(attrs["extr"] == .int(0) && attrs["sign"] == .int(1) && attrs["bsiz"] == .int(256))
        let signature = try P256.Signing.ECDSASignature(derRepresentation: try Self.sign(t, attrs, [1, 2, 3], .ecdsaMessageX962SHA256))
        #expect(original.publicKey.isValidSignature(signature, for: [1, 2, 3] as [UInt8]))
    }

    static func importItem(_ key: P256.Signing.PrivateKey, _ extra: AttributeDictionary = [:]) -> AttributeDictionary {
        ["class": .string("keys"), "kcls": .int(1), "type": .int(73), "v_Data": .data(Array(key.x963Representation))]
            .merging(extra) { $1 }
    }

    /// The one rule for derived attributes, as for a certificate's (docs/semantics.md,
    /// deviations): Apple's client would let the caller's value win; here a wrong klbl would
    /// join the key to another key's certificate.
    @Test(arguments: [
        ("klbl", AttributeValue.data([7])), ("bsiz", .int(384)), ("bsiz", .int(0)), ("esiz", .int(128)),
        ("priv", .int(0)), ("perm", .int(0)), ("sens", .int(0)), ("asen", .int(0)), ("next", .int(0)),
    ])
    func anImportGivingADerivedAttributeAnotherValueIsErrSecParam(_ code: String, _ value: AttributeValue) throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(Self.importItem(P256.Signing.PrivateKey(), [code: value])) }
        #expect(try t.count(["class": .string("keys")]) == 0)
    }

    @Test func anImportGivingEveryDerivedAttributeItsDerivedValueIsStored() throws {
        let t = try TemporaryStore()
        let key = P256.Signing.PrivateKey()
        let klbl = Array(Insecure.SHA1.hash(data: key.publicKey.x963Representation))
        try t.add(Self.importItem(key, ["klbl": .data(klbl), "bsiz": .int(256), "esiz": .int(256), "priv": .int(1),
                                        "perm": .int(1), "sens": .int(1), "asen": .int(1), "next": .int(1)]))
        #expect(try t.count(["class": .string("keys")]) == 1)
    }

    @Test func anExtractableImportIsNotSensitiveAndCannotSayItIs() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(Self.importItem(P256.Signing.PrivateKey(), ["extr": .int(1), "sens": .int(1)])) }
        try t.add(Self.importItem(P256.Signing.PrivateKey(), ["extr": .int(1), "sens": .int(0), "next": .int(0)]))
        #expect(try t.count(["class": .string("keys")]) == 1)
    }

    @Test(arguments: ["priv", "perm", "sens"])
    func anUpdateGivingADerivedAttributeAnotherValueIsErrSecParam(_ code: String) throws {
        let t = try TemporaryStore()
        try t.add(Self.importItem(P256.Signing.PrivateKey(), ["labl": .string("k")]))
        let query: AttributeDictionary = ["class": .string("keys"), "labl": .string("k")]
        expectStatus(.param) { try t.store.items.update(query, changes: [code: .int(0)], scope: TemporaryStore.app) }
        try t.store.items.update(query, changes: [code: .int(1)], scope: TemporaryStore.app)
        #expect(try t.attributes(query)?[code] == .int(1))
    }

    @Test(arguments: [
        (KeyType.ed25519, [UInt8](repeating: 7, count: 31)),
        (KeyType.x25519, [UInt8](repeating: 7, count: 33)),
        (KeyType.p256, [UInt8](repeating: 7, count: 97)),
        (KeyType.p256, [0x04] + [UInt8](repeating: 0, count: 64) + [UInt8](repeating: 0xff, count: 32)),
    ])
    func aMalformedImportIsErrSecParam(_ type: KeyType, _ bytes: [UInt8]) throws {
        let t = try TemporaryStore()
        expectStatus(.param) {
            try t.add(["class": .string("keys"), "kcls": .int(1), "type": .int(type.attributeNumber), "v_Data": .data(bytes)])
        }
        #expect(try t.count(["class": .string("keys")]) == 0)
    }

    @Test func aP256ImportWhosePointIsNotItsScalarsIsErrSecParam() throws {
        let t = try TemporaryStore()
        let one = Array(P256.Signing.PrivateKey().x963Representation)
        let two = Array(P256.Signing.PrivateKey().x963Representation)
        expectStatus(.param) {
            try t.add(["class": .string("keys"), "kcls": .int(1), "type": .int(73), "v_Data": .data(Array(one.prefix(65)) + two.suffix(32))])
        }
    }

    @Test func aRestoredPrivateKeyIsCheckedAsAnImportIs() throws {
        let t = try TemporaryStore()
        let item: AttributeDictionary = ["class": .string("keys"), "kcls": .int(1), "type": .int(105), "v_Data": .data([1, 2, 3]),
                                         "agrp": .string("com.example.app"), "pdmn": .string("ak"), "sync": .int(0),
                                         "cdat": .date(1), "mdat": .date(1)]
        expectStatus(.param) { _ = try t.store.restorer.importItems([item], onConflict: .fail) }
        #expect(try t.count(["class": .string("keys")]) == 0)
    }

    @Test func generationRefusesAnUnknownTypeAndGivenBytes() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { _ = try t.store.keys.generateKey(["type": .int(42)], scope: TemporaryStore.app) }
        expectStatus(.param) { _ = try t.store.keys.generateKey(["type": .int(105), "v_Data": .data([1])], scope: TemporaryStore.app) }
    }
}
