import KeychainCrypto
import KeychainModel
import KeychainStorage
import StoreTestSupport
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
        expectStatus(.param) { try t.store.items.update(query, changes: ["labl": .string("new")], scope: TemporaryStore.app) }
        #expect(try t.attributes(genp("s", "a"))?["labl"] == .string("old"))
    }

    @Test func authUISkipInADeleteIsParamAndDeletesNothing() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        var query = genp("s", "a")
        query["u_AuthUI"] = .string("u_AuthUIS")
        expectStatus(.param) { try t.store.items.delete(query, scope: TemporaryStore.app) }
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

    // MARK: numbers in blob attributes

    @Test func anAccountAddedAsANumberIsNotFoundByItsDecimalText() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .int(42)])
        expectStatus(.itemNotFound) { _ = try t.copy(["class": .string("genp"), "svce": .string("s"), "acct": .string("42")]) }
        expectStatus(.itemNotFound) { _ = try t.copy(["class": .string("genp"), "svce": .string("s"), "acct": .data(bytes("42"))]) }
        #expect(try t.count(["class": .string("genp"), "svce": .string("s"), "acct": .int(42)]) == 1)
    }

    @Test func anAccountAddedAsDecimalTextIsNotFoundByTheNumber() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "42"))
        expectStatus(.itemNotFound) { _ = try t.copy(["class": .string("genp"), "svce": .string("s"), "acct": .int(42)]) }
    }

    @Test func decimalTextIsNotADuplicateOfTheNumber() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .int(42), "v_Data": .data([1])])
        try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .string("42"), "v_Data": .data([2])])
        #expect(try t.count(["class": .string("genp"), "svce": .string("s")]) == 2)
        #expect(try t.secret(["class": .string("genp"), "svce": .string("s"), "acct": .int(42)]) == [1])
        #expect(try t.secret(["class": .string("genp"), "svce": .string("s"), "acct": .string("42")]) == [2])
    }

    @Test func theSameNumberTwiceIsADuplicate() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .int(42)])
        expectStatus(.duplicateItem) { try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .int(42)]) }
    }

    @Test func aNumberInABlobAttributeWithoutAColumnIsNotItsDecimalText() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["gena": .int(7)]))
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "a", ["gena": .string("7")])) }
        #expect(try t.count(genp("s", "a", ["gena": .int(7)])) == 1)
    }

    @Test func aNumberComesBackAsANumber() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("inet"), "srvr": .int(8), "acct": .int(42)])
        let attrs = try #require(try t.attributes(["class": .string("inet"), "srvr": .int(8)]))
        #expect(attrs["acct"] == .int(42))
        #expect(attrs["srvr"] == .int(8))
    }

    @Test func aBooleanAccountIsParamAndStoresNothing() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .bool(true)]) }
        #expect(try t.store.itemCount() == 0)
    }

    // MARK: identities

    @Test func aCertificateWithAKeyMarkedPrivateOfAnyKeyClassIsAnIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.p256KeyID), "kcls": .int(2), "priv": .int(1)])
        #expect(try t.secret(["class": .string("idnt")]) == bytes("K"))
    }

    @Test func aPrivateClassKeyNotMarkedPrivateFormsNoIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.p256KeyID), "kcls": .int(1)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K0")), "klbl": .data(TestCertificate.p256KeyID), "kcls": .int(0), "priv": .int(0)])
        expectStatus(.itemNotFound) { _ = try t.copy(["class": .string("idnt")]) }
    }

    @Test func privGivenAsABooleanJoinsTheIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.p256KeyID), "priv": .bool(true)])
        #expect(try t.count(["class": .string("idnt")]) == 1)
    }

    // MARK: dates on update

    @Test func anUpdateCarryingMdatSetsItToNowStrictlyLater() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let before = try #require(try t.attributes(genp("s", "a")))
        // The clock has not moved: mdat still goes forward, and the caller's date is not used.
        try t.store.items.update(genp("s", "a"), changes: ["mdat": .date(5), "labl": .string("L")], scope: TemporaryStore.app)
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
        try t.store.items.update(genp("s", "a"), changes: ["mdat": .date(0)], scope: TemporaryStore.app)
        #expect(try t.attributes(genp("s", "a"))?["mdat"] == .date(t.clock.now))
    }

    @Test func anUpdateCarryingCdatLeavesTheCreationDate() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let created = try #require(try t.attributes(genp("s", "a"))?["cdat"])
        t.clock.now += 60
        try t.store.items.update(genp("s", "a"), changes: ["cdat": .date(1), "mdat": .date(2)], scope: TemporaryStore.app)
        #expect(try t.attributes(genp("s", "a"))?["cdat"] == created)
    }

    @Test func anUpdateCarryingADateThatIsNoDateIsParam() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        expectStatus(.param) { try t.store.items.update(genp("s", "a"), changes: ["mdat": .string("now")], scope: TemporaryStore.app) }
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
        expectStatus(.param) { try t.store.items.update(query, changes: ["pdmn": .string("aku")], scope: TemporaryStore.app) }
        expectStatus(.param) { try t.store.items.update(query, changes: ["accc": .string("dku")], scope: TemporaryStore.app) }
        #expect(try t.attributes(query)?["pdmn"] == .string("ak"))
    }

    @Test func anUpdateMakingAThisDeviceOnlyItemSynchronizableIsParam() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["pdmn": .string("aku")]))
        expectStatus(.param) { try t.store.items.update(genp("s", "a"), changes: ["sync": .bool(true)], scope: TemporaryStore.app) }
        #expect(try t.count(genp("s", "a")) == 1)
    }

    @Test func anUpdateOfSeveralItemsThatLeavesOneSynchronizableAndThisDeviceOnlyChangesNone() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b", ["pdmn": .string("aku")]))
        expectStatus(.param) {
            try t.store.items.update(["class": .string("genp"), "svce": .string("s")], changes: ["sync": .bool(true)], scope: TemporaryStore.app)
        }
        #expect(try t.count(["class": .string("genp"), "svce": .string("s")]) == 2)
    }

    @Test func synchronizableWithAccessControlFlagsIsParamOnAddAndUpdate() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["sync": .bool(true), "accc": .string("ak;1")])) }
        try t.add(genp("s", "a", ["sync": .bool(true)]))
        expectStatus(.param) {
            try t.store.items.update(genp("s", "a", ["sync": .bool(true)]), changes: ["accc": .string("ak;1")], scope: TemporaryStore.app)
        }
        expectStatus(.param) {
            try t.store.items.update(genp("s", "a", ["sync": .bool(true)]), changes: ["accc": .string("ak;1"), "sync": .bool(true)],
                                     scope: TemporaryStore.app)
        }
        #expect(try t.attributes(genp("s", "a", ["sync": .bool(true)]))?["accc"] == nil)
    }
}

/// Until schema version 4 a number in a blob attribute hashed as its decimal text. Databases
/// written then keep working: their rows are rehashed once their class key is loaded.
@Suite("Rows hashed before schema version 4") struct LegacyNumberHashTests {
    static let numberAccount: AttributeDictionary = ["class": .string("genp"), "svce": .string("s"), "acct": .int(42)]
    static let textAccount: AttributeDictionary = ["class": .string("genp"), "svce": .string("s"), "acct": .string("42")]

    /// Rewrites every genp row of `pdmn` as keychaind wrote it before version 4 (numbers in
    /// blob columns hashed as decimal text, sealed with those columns) and lists the class as
    /// waiting for its rehash, as the version-4 migration does for an old database.
    static func makeLegacy(_ t: TemporaryStore, _ pdmn: Protection) throws {
        let store: ItemStore = t.store
        var rows: [ItemRow] = []
        try store.table.forEachRow(of: .genericPassword, protection: pdmn) { rows.append($0); return true }
        let key = try store.classKey(pdmn)
        try store.database.transaction { () throws(KeychainError) in
            for row in rows {
                let item = try store.codec.open(row, classKey: key, withAttributes: true)
                var legacy = row
                legacy.hashes = store.codec.hashes(of: .genericPassword, item.attributes, legacy: true)
                try store.table.replace(store.codec.seal(legacy, attributes: item.attributes, data: item.data, classKey: key))
            }
            try store.database.run("INSERT INTO number_rehash(pdmn) VALUES (?)", [.text(pdmn.rawValue)])
        }
    }

    static func pending(_ t: TemporaryStore) throws -> [String] {
        try NumberRehashTable(t.store.database).pending()
    }

    @Test func aLegacyRowIsFoundByDecimalTextUntilItIsRehashed() throws {
        // The simulation is faithful: the old row answers to the text, not to the number.
        let t = try TemporaryStore()
        try t.add(Self.numberAccount)
        try Self.makeLegacy(t, .whenUnlocked)
        #expect(try t.count(Self.textAccount) == 1)
        expectStatus(.itemNotFound) { _ = try t.copy(Self.numberAccount) }
    }

    @Test func openingTheStoreRehashesLegacyRowsOfUnlockedClasses() throws {
        let t = try TemporaryStore()
        try t.add(Self.numberAccount.merging(["v_Data": .data([9]), "r_PersistentRef": .bool(true)]) { a, _ in a })
        let before = try #require(try t.attributes(Self.numberAccount.merging(["r_PersistentRef": .bool(true)]) { a, _ in a }))
        try Self.makeLegacy(t, .whenUnlocked)
        try t.reopen()
        #expect(try Self.pending(t).isEmpty)
        #expect(try t.secret(Self.numberAccount) == [9])
        let after = try #require(try t.attributes(Self.numberAccount.merging(["r_PersistentRef": .bool(true)]) { a, _ in a }))
        #expect(after == before)  // same dates, same persistent reference, same attributes
        try t.add(Self.textAccount)  // no longer taken by the number's old hash
        #expect(try t.count(["class": .string("genp"), "svce": .string("s")]) == 2)
    }

    @Test func aNewDatabaseHasNothingToRehash() throws {
        let t = try TemporaryStore()
        #expect(try Self.pending(t).isEmpty)
    }

    @Test func theMigrationListsTheClassesAnOldDatabaseHolds() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b", ["pdmn": .string("ck")]))
        try t.store.setPasscode(bytes("1234"))
        t.store.lock()
        try t.editFile { db in
            try undoSchemaV6(db)
            try db.execute("DROP TABLE item_attributes")  // schema v5
            try db.execute("DROP TABLE number_rehash")
            try db.execute("PRAGMA user_version = 3")
        }
        // Locked after the restart: only the Always classes are loaded, and none holds a row.
        #expect(try Self.pending(t) == ["ak", "ck"])
        try t.store.unlock(passcode: bytes("1234"))
        #expect(try Self.pending(t).isEmpty)
    }

    @Test func aLockedClassIsRehashedAtTheUnlock() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        try t.add(Self.numberAccount.merging(["v_Data": .data([9])]) { a, _ in a })
        try Self.makeLegacy(t, .whenUnlocked)
        try t.reopen()  // locked: the ak key is not loaded, the row keeps its old hash
        #expect(try Self.pending(t) == ["ak"])
        try t.store.unlock(passcode: bytes("1234"))
        #expect(try Self.pending(t).isEmpty)
        #expect(try t.secret(Self.numberAccount) == [9])
    }

    @Test func whileALockedClassWaitsAnAddThatItsOldRowMayHoldWaitsForTheUnlock() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        try t.add(Self.numberAccount)
        try Self.makeLegacy(t, .whenUnlocked)
        try t.reopen()
        let always = Self.numberAccount.merging(["pdmn": .string("dk")]) { _, new in new }
        // The locked row may be this number (a duplicate) or this text: it cannot be told yet.
        expectStatus(.interactionNotAllowed) { try t.add(always) }
        try t.add(genp("s", "43", ["pdmn": .string("dk")]))  // other keys are not held back
        try t.store.unlock(passcode: bytes("1234"))
        expectStatus(.duplicateItem) { try t.add(always) }  // pdmn is not part of the key
    }

    @Test func anUpgradeLeavesAnAlteredRowAsItIs() throws {
        let t = try TemporaryStore()
        try t.add(Self.numberAccount)
        try Self.makeLegacy(t, .whenUnlocked)
        try t.store.database.run("UPDATE items SET data = zeroblob(length(data))")
        try t.reopen()
        #expect(try Self.pending(t).isEmpty)
        expectStatus(.decode) { _ = try t.copy(["class": .string("genp"), "svce": .string("s")]) }
    }
}
