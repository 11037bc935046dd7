import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore

/// Rules where an independent client, checking against securityd, found keychaind different
/// (issue 13): each test is one of Apple's rules, against the in-process store.
@Suite("SecItem rules securityd follows") struct SecItemRuleTests {
    // MARK: u_AuthUI

    @Test func authUISkipInAnUpdateIsParamAndChangesNothing() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["labl": .string("old")]))
        var query = genp("s", "a")
        query["u_AuthUI"] = .string("u_AuthUIS")
        expectStatus(.param) { try t.store.update(query, changes: ["labl": .string("new")], scope: TemporaryStore.app) }
        #expect(try t.attributes(genp("s", "a"))?["labl"] == .string("old"))
    }

    @Test func authUISkipInADeleteIsParamAndDeletesNothing() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        var query = genp("s", "a")
        query["u_AuthUI"] = .string("u_AuthUIS")
        expectStatus(.param) { try t.store.delete(query, scope: TemporaryStore.app) }
        #expect(try t.count(genp("s", "a")) == 1)
    }

    @Test func authUISkipInAnAddIsParamAndAddsNothing() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["u_AuthUI": .string("u_AuthUIS")])) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func authUISkipInCopyMatchingFindsTheItems() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        #expect(try t.secret(genp("s", "a", ["u_AuthUI": .string("u_AuthUIS")])) == [1])
    }

    // MARK: identities

    @Test func aCertificateWithAKeyMarkedPrivateOfAnyKeyClassIsAnIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(bytes("C")), "pkhh": .data([7])])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data([7]), "kcls": .int(2), "priv": .int(1)])
        #expect(try t.secret(["class": .string("idnt")]) == bytes("K"))
    }

    @Test func aPrivateClassKeyNotMarkedPrivateFormsNoIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(bytes("C")), "pkhh": .data([7])])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data([7]), "kcls": .int(1)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K0")), "klbl": .data([7]), "kcls": .int(0), "priv": .int(0)])
        expectStatus(.itemNotFound) { _ = try t.copy(["class": .string("idnt")]) }
    }

    @Test func privGivenAsABooleanJoinsTheIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(bytes("C")), "pkhh": .data([7])])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data([7]), "priv": .bool(true)])
        #expect(try t.count(["class": .string("idnt")]) == 1)
    }

    // MARK: dates on update

    @Test func anUpdateCarryingMdatSetsItToNowStrictlyLater() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let before = try #require(try t.attributes(genp("s", "a")))
        // The clock has not moved: mdat still goes forward, and the caller's date is not used.
        try t.store.update(genp("s", "a"), changes: ["mdat": .date(5), "labl": .string("L")], scope: TemporaryStore.app)
        let after = try #require(try t.attributes(genp("s", "a")))
        guard case .date(let old)? = before["mdat"], case .date(let new)? = after["mdat"] else {
            Issue.record("no mdat")
            return
        }
        #expect(new > old)
        #expect(new != 5)
        #expect(after["labl"] == .string("L"))
    }

    @Test func anUpdateCarryingOnlyMdatStampsTheItemAtTheClock() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        t.clock.now += 60
        try t.store.update(genp("s", "a"), changes: ["mdat": .date(0)], scope: TemporaryStore.app)
        #expect(try t.attributes(genp("s", "a"))?["mdat"] == .date(t.clock.now))
    }

    @Test func anUpdateCarryingCdatLeavesTheCreationDate() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let created = try #require(try t.attributes(genp("s", "a"))?["cdat"])
        t.clock.now += 60
        try t.store.update(genp("s", "a"), changes: ["cdat": .date(1), "mdat": .date(2)], scope: TemporaryStore.app)
        #expect(try t.attributes(genp("s", "a"))?["cdat"] == created)
    }

    @Test func anUpdateCarryingADateThatIsNoDateIsParam() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        expectStatus(.param) { try t.store.update(genp("s", "a"), changes: ["mdat": .string("now")], scope: TemporaryStore.app) }
    }

    // MARK: synchronizable and ThisDeviceOnly

    @Test func addingASynchronizableThisDeviceOnlyItemIsParam() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["sync": .bool(true), "pdmn": .string("cku")])) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func anUpdateMakingASynchronizableItemThisDeviceOnlyIsParam() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["sync": .bool(true)]))
        let query = genp("s", "a", ["sync": .bool(true)])
        expectStatus(.param) { try t.store.update(query, changes: ["pdmn": .string("aku")], scope: TemporaryStore.app) }
        expectStatus(.param) { try t.store.update(query, changes: ["accc": .string("dku")], scope: TemporaryStore.app) }
        #expect(try t.attributes(query)?["pdmn"] == .string("ak"))
    }

    @Test func anUpdateMakingAThisDeviceOnlyItemSynchronizableIsParam() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["pdmn": .string("aku")]))
        expectStatus(.param) { try t.store.update(genp("s", "a"), changes: ["sync": .bool(true)], scope: TemporaryStore.app) }
        #expect(try t.count(genp("s", "a")) == 1)
    }

    @Test func anUpdateOfSeveralItemsThatLeavesOneSynchronizableAndThisDeviceOnlyChangesNone() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b", ["pdmn": .string("aku")]))
        expectStatus(.param) {
            try t.store.update(["class": .string("genp"), "svce": .string("s")], changes: ["sync": .bool(true)], scope: TemporaryStore.app)
        }
        #expect(try t.count(["class": .string("genp"), "svce": .string("s")]) == 2)
    }

    @Test func synchronizableWithAccessControlFlagsIsUnimplementedOnAddAndUpdate() throws {
        let t = try TemporaryStore()
        expectStatus(.unimplemented) { try t.add(genp("s", "a", ["sync": .bool(true), "accc": .string("ak;1")])) }
        try t.add(genp("s", "a", ["sync": .bool(true)]))
        expectStatus(.unimplemented) {
            try t.store.update(genp("s", "a", ["sync": .bool(true)]), changes: ["accc": .string("ak;1")], scope: TemporaryStore.app)
        }
    }
}

