import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore
import StoreTestSupport

/// An item with the accc flag applicationPassword in the store (issue 29): its row holds the
/// secret sealed under the password (ApplicationPasswordSeal), so whoever holds the database,
/// the device key and the class keys still lacks it. The daemon seals and opens with the
/// caller's password (ApplicationPasswordTests); the store alone never answers the secret.
@Suite("The application password in the store")
struct ApplicationPasswordStoreTests {
    static let secret = Array("launch code".utf8)
    static let password = Array("correct horse".utf8)
    static let item = genp("s", "a", ["accc": .string("ak;2147483648"), "v_Data": .data(secret)])

    static func sealed(_ password: [UInt8] = password) throws -> SecretBytes {
        SecretBytes(try ApplicationPasswordSeal.seal(secret, password: password, parameters: .testingOnly))
    }

    /// The one row of the store, opened with its class key: what a reader of the database with
    /// the device key and the class keys gets.
    static func openedWithTheClassKeyAlone(_ t: TemporaryStore) throws -> StoredItem {
        var rows: [ItemRow] = []
        try t.store.table.forEachRow(of: .genericPassword, protection: .whenUnlocked) { row in
            rows.append(row)
            return true
        }
        let row = try #require(rows.first)
        return try t.store.codec.open(row, classKey: try t.store.classKey(.whenUnlocked), withAttributes: true)
    }

    @Test func theClassKeyAloneOpensTheRowButNotTheSecret() throws {
        let t = try TemporaryStore()
        try t.store.items.add(Self.item, scope: TemporaryStore.app, sealedSecret: try Self.sealed())
        let opened = try Self.openedWithTheClassKeyAlone(t)
        #expect(opened.sealedUnderPassword)
        #expect(Array(opened.data) != Self.secret)
        let held = Array(opened.data)
        #expect(!(0...(held.count - Self.secret.count)).contains { Array(held[$0..<($0 + Self.secret.count)]) == Self.secret })
        expectStatus(.authFailed) { _ = try ApplicationPasswordSeal.open(opened.data, password: Array("wrong".utf8)) }
        #expect(Array(try ApplicationPasswordSeal.open(opened.data, password: Self.password)) == Self.secret)
    }

    @Test func theStoreNeverAnswersTheSealedLayerAsTheSecret() throws {
        let t = try TemporaryStore()
        try t.store.items.add(Self.item, scope: TemporaryStore.app, sealedSecret: try Self.sealed())
        expectStatus(.interactionNotAllowed) { _ = try t.secret(genp("s", "a")) }
        expectStatus(.interactionNotAllowed) {
            _ = try t.copy(genp("s", "a", ["r_Data": .bool(true), "r_Attributes": .bool(true)]))
        }
        // Attributes alone need no password.
        #expect(try t.attributes(genp("s", "a"))?["accc"] == .string("ak;2147483648"))
    }

    @Test func anAddWithoutThePasswordIsInteractionNotAllowedAndStoresNothing() throws {
        let t = try TemporaryStore()
        expectStatus(.interactionNotAllowed) { try t.add(Self.item) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func anUpdateOfTheSecretWithoutThePasswordIsRefusedAndOfAttributesIsNot() throws {
        let t = try TemporaryStore()
        try t.store.items.add(Self.item, scope: TemporaryStore.app, sealedSecret: try Self.sealed())
        expectStatus(.interactionNotAllowed) { try t.store.items.update(genp("s", "a"), changes: ["v_Data": .data([1])], scope: TemporaryStore.app) }
        try t.store.items.update(genp("s", "a"), changes: ["labl": .string("renamed")], scope: TemporaryStore.app)
        let opened = try Self.openedWithTheClassKeyAlone(t)
        #expect(opened.attributes["labl"] == .string("renamed"))
        #expect(Array(try ApplicationPasswordSeal.open(opened.data, password: Self.password)) == Self.secret)
    }

    /// Inside the row the salt is authenticated by the item's own layers (an edit there is
    /// errSecDecode, ApplicationPasswordTests); the password's layer alone opens for nobody
    /// once its salt changed, the right password included.
    @Test func anEditedSaltOpensNothing() throws {
        var sealed = Array(try Self.sealed())
        sealed[10] ^= 0x01  // a salt byte
        expectStatus(.authFailed) { _ = try ApplicationPasswordSeal.open(sealed, password: Self.password) }
    }

    /// The attack on a key: whoever reads the database with the device key and every class key
    /// opens the key's row, its attributes and its public key, not its private bytes; and the
    /// store never takes the sealed layer for the key in a signature.
    @Test func theClassKeyAloneOpensAKeysRowButNotItsPrivateBytes() throws {
        let t = try TemporaryStore()
        let privateBytes = [UInt8](repeating: 7, count: 32)
        let key: AttributeDictionary = [
            "class": .string("keys"), "kcls": .int(1), "type": .int(KeyType.ed25519.attributeNumber), "labl": .string("signing"),
            "sign": .int(1), "accc": .string("ak;2147483648"), "v_Data": .data(SecretBytes(privateBytes)),
        ]
        let sealed = SecretBytes(try ApplicationPasswordSeal.seal(privateBytes, password: Self.password, parameters: .testingOnly))
        try t.store.items.add(key, scope: TemporaryStore.app, sealedSecret: sealed)
        var rows: [ItemRow] = []
        try t.store.table.forEachRow(of: .key, protection: .whenUnlocked) { row in
            rows.append(row)
            return true
        }
        let opened = try t.store.codec.open(try #require(rows.first), classKey: try t.store.classKey(.whenUnlocked), withAttributes: true)
        let held = Array(opened.data)
        #expect(!(0...(held.count - privateBytes.count)).contains { Array(held[$0..<($0 + privateBytes.count)]) == privateBytes })
        let publicKey = try PrivateKey(stored: SecretBytes(privateBytes), type: .ed25519).publicKey
        #expect(opened.attributes["xpub"] == .data(SecretBytes(publicKey)))
        #expect(Array(try ApplicationPasswordSeal.open(opened.data, password: Self.password)) == privateBytes)
        let call = try t.store.keys.signature(["class": .string("keys"), "labl": .string("signing")],
                                              parameters: ["algorithm": .string(KeySigningAlgorithm.ed25519.rawValue), "data": .data([1])], scope: TemporaryStore.app).opened()
        #expect(call.needsUnsealing)
        expectStatus(.interactionNotAllowed) { _ = try call.run() }
        #expect(try call.unsealed(try ApplicationPasswordSeal.open(opened.data, password: Self.password)).run() != .data(.empty))
    }
}
