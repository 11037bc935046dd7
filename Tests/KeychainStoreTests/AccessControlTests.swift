import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

@Suite("kSecAttrAccessControl beside kSecAttrAccessible (checklist item 8)")
struct AccessControlTests {
    @Test func accessControlAloneSetsTheProtectionClass() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["accc": .string("ck")]))
        #expect(try t.attributes(genp("s", "a"))?["pdmn"] == .string("ck"))
    }

    @Test func accessibleAndAccessControlThatAgreeAreAccepted() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["accc": .string("dku"), "pdmn": .string("dku")]))
        #expect(try t.attributes(genp("s", "a"))?["pdmn"] == .string("dku"))
    }

    @Test func accessibleAndAccessControlThatDisagreeAreAParameterError() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["accc": .string("ck"), "pdmn": .string("ak")])) }
        expectStatus(.param) { try t.add(genp("s", "a", ["accc": .string("ak;1"), "pdmn": .string("ak")])) }
        #expect(try t.store.itemCount() == 0)
    }

    /// The store in process has nobody to ask: the secret of an item that asks first is never
    /// its answer (the daemon asks, ItemsThatAskFirstTests).
    @Test func aSecretThatAsksFirstIsNotReadWithoutAPrompt() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["accc": .string("ak;1"), "v_Data": .data([1])]))
        expectStatus(.interactionNotAllowed) { _ = try t.secret(genp("s", "a")) }
        #expect(try t.attributes(genp("s", "a"))?["accc"] == .string("ak;1"))
    }

    @Test func malformedAccessControlIsAParameterError() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["accc": .int(1)])) }
        expectStatus(.param) { try t.add(genp("s", "a", ["accc": .string("sometimes")])) }
        expectStatus(.param) { try t.add(genp("s", "a", ["accc": .string("ak;x")])) }
    }

    @Test func accessControlInASearchDoesNotFilter() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["pdmn": .string("ak"), "v_Data": .data([1])]))
        #expect(try t.secret(genp("s", "a", ["accc": .string("dk")])) == [1])
    }

    @Test func updatingAccessControlMovesTheItem() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.store.items.update(genp("s", "a"), changes: ["accc": .string("cku")], scope: TemporaryStore.app)
        #expect(try t.attributes(genp("s", "a"))?["pdmn"] == .string("cku"))
        #expect(try t.secret(genp("s", "a")) == [1])
    }
}
