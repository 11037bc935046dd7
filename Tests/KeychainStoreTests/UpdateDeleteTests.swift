import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

@Suite("Update and delete act on every match, atomically")
struct UpdateDeleteTests {
    let scope = TemporaryStore.app

    @Test func updateReplacesTheSecret() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.store.items.update(genp("s", "a"), changes: ["v_Data": .data([2, 2])], scope: scope)
        #expect(try t.secret(genp("s", "a")) == [2, 2])
    }

    @Test func updateChangesEveryMatchingItem() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b"))
        try t.add(genp("other", "c"))
        try t.store.items.update(["class": .string("genp"), "svce": .string("s")], changes: ["labl": .string("L")], scope: scope)
        #expect(try t.count(["class": .string("genp"), "labl": .string("L")]) == 2)
    }

    @Test func updateMovesAnItemToAnotherProtectionClass() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([9])]))
        try t.store.items.update(genp("s", "a"), changes: ["pdmn": .string("dk")], scope: scope)
        try t.store.setPasscode(bytes("1234"))
        try t.reopen()  // locked since boot: only Always items are readable
        #expect(try t.secret(genp("s", "a")) == [9])
        #expect(try t.attributes(genp("s", "a"))?["pdmn"] == .string("dk"))
    }

    @Test func updateMayChangePrimaryKeyAttributes() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.store.items.update(genp("s", "a"), changes: ["acct": .string("z")], scope: scope)
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "a")) }
        #expect(try t.secret(genp("s", "z")) == [1])
    }

    @Test func updateCollidingWithAnotherItemChangesNothingAtAll() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.add(genp("s", "b", ["v_Data": .data([2])]))
        try t.add(genp("s", "c", ["v_Data": .data([3])]))
        try t.store.items.update(genp("s", "a"), changes: ["labl": .string("first")], scope: scope)
        // a, b and c all become "c": a's rewrite succeeds before b's clashes, and must be
        // rolled back with it.
        expectStatus(.duplicateItem) {
            try t.store.items.update(["class": .string("genp"), "svce": .string("s")],
                               changes: ["acct": .string("c"), "labl": .string("moved")], scope: scope)
        }
        #expect(try t.secret(genp("s", "a")) == [1])
        #expect(try t.secret(genp("s", "b")) == [2])
        #expect(try t.attributes(genp("s", "a"))?["labl"] == .string("first"))
        #expect(try t.count(["class": .string("genp"), "labl": .string("moved")]) == 0)
    }

    @Test func modificationDateStrictlyIncreasesEvenIfTheClockStands() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.store.items.update(genp("s", "a"), changes: ["labl": .string("1")], scope: scope)
        let attrs = try #require(try t.attributes(genp("s", "a")))
        guard case .date(let created)? = attrs["cdat"], case .date(let modified)? = attrs["mdat"] else {
            Issue.record("dates missing")
            return
        }
        #expect(modified > created)
        #expect(abs(modified - created - 0.001) < 1e-6)
    }

    @Test func updateWithNoMatchIsItemNotFound() throws {
        let t = try TemporaryStore()
        expectStatus(.itemNotFound) { try t.store.items.update(genp("s", "a"), changes: ["labl": .string("x")], scope: scope) }
    }

    @Test func updateAndDeleteRejectMatchLimitEvenAll() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let q = genp("s", "a", ["m_Limit": .string("m_LimitAll")])
        expectStatus(.param) { try t.store.items.update(q, changes: ["labl": .string("x")], scope: scope) }
        expectStatus(.param) { try t.store.items.delete(q, scope: scope) }
        #expect(try t.count(genp("s", "a")) == 1)
    }

    @Test func updateRejectsClassInTheAttributesToUpdate() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        expectStatus(.noSuchAttribute) {
            try t.store.items.update(genp("s", "a"), changes: ["class": .string("inet")], scope: scope)
        }
    }

    @Test func updateToWhenPasscodeSetWithoutPasscodeIsNotAvailable() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        expectStatus(.notAvailable) { try t.store.items.update(genp("s", "a"), changes: ["pdmn": .string("akpu")], scope: scope) }
        #expect(try t.secret(genp("s", "a")) == [1])
    }

    @Test func deleteRemovesEveryMatch() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b"))
        try t.add(genp("t", "a"))
        try t.store.items.delete(["class": .string("genp"), "svce": .string("s")], scope: scope)
        #expect(try t.count(["class": .string("genp")]) == 1)
        expectStatus(.itemNotFound) { try t.store.items.delete(["class": .string("genp"), "svce": .string("s")], scope: scope) }
    }

    @Test func deleteByAnAttributeWithoutAColumnChecksTheSealedValue() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["desc": .string("keep")]))
        try t.add(genp("s", "b", ["desc": .string("drop")]))
        try t.store.items.delete(["class": .string("genp"), "desc": .string("drop")], scope: scope)
        #expect(try t.count(["class": .string("genp")]) == 1)
        #expect(try t.attributes(["class": .string("genp")])?["acct"] == .string("a"))
    }

    @Test func deleteLeavesSynchronizableItemsAloneUnlessAsked() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["sync": .bool(true)]))
        expectStatus(.itemNotFound) { try t.store.items.delete(genp("s", "a"), scope: scope) }
        try t.store.items.delete(genp("s", "a", ["sync": .string("syna")]), scope: scope)
        #expect(try t.store.itemCount() == 0)
    }
}
