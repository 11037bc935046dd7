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

    /// The daemon asks before an update and names the items the person allowed by persistent
    /// id: an item that asks first and was not among them (found only under the lock, after
    /// the question) is not changed, nor is any other item of the call.
    @Test func anUpdateChangesOnlyTheItemsThatAskWhichThePersonAllowed() throws {
        let t = try TemporaryStore()
        guard case .single(.persistentRef(let ref)) = try t.add(genp("s", "a", ["accc": .string("ak;1"), "v_Data": .data([1]),
                                                                               "r_PersistentRef": .bool(true)])) else {
            Issue.record("no reference")
            return
        }
        let question = try #require(try t.store.items.updateQuestion(genp("s", "a"), changes: ["labl": .string("x")], scope: TemporaryStore.app))
        #expect(question.items == [Array(ref.dropFirst(4))])
        try t.add(genp("s", "b", ["accc": .string("ak;1"), "v_Data": .data([2])]))
        expectStatus(.interactionNotAllowed) {
            try t.store.items.update(["class": .string("genp"), "svce": .string("s")], changes: ["labl": .string("x")],
                                     scope: TemporaryStore.app, allowedByPerson: question.items)
        }
        #expect(try t.attributes(genp("s", "a"))?["labl"] == nil)
        try t.store.items.update(genp("s", "a"), changes: ["labl": .string("x"), "pdmn": .string("ck")], scope: TemporaryStore.app,
                                 allowedByPerson: question.items)
        #expect(try t.attributes(genp("s", "a"))?["accc"] == .string("ck;1"))
        #expect(try t.store.items.updateQuestion(genp("s", "c"), changes: ["labl": .string("x")], scope: TemporaryStore.app) == nil)
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
