import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore
import StoreTestSupport

/// Secret Service items in the store: the attribute index (table item_attributes), its search
/// and CreateItem's replace (docs/semantics.md, "Secret Service items").
@Suite("Secret Service items and their attribute index")
struct SecretServiceStoreTests {
    static let login = "login"

    func item(_ pairs: [String: String], secret: String = "s", label: String = "l", pdmn: String = "ck",
              collection: String = login) throws -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("secret-service:\(collection)"),
         "xsat": .data(try SecretServiceAttributes(pairs).encoded), "labl": .string(label),
         "v_Data": .data(bytes(secret)), "pdmn": .string(pdmn)]
    }

    @discardableResult
    func add(_ t: TemporaryStore, _ pairs: [String: String], secret: String = "s", replace: Bool = false,
             pdmn: String = "ck") throws -> (ref: [UInt8], replaced: Bool) {
        let r = try t.store.attributeIndex.add(try item(pairs, secret: secret, pdmn: pdmn), replace: replace, scope: TemporaryStore.app)
        guard case .data(let ref)? = r["v_PersistentRef"], case .bool(let replaced)? = r["replaced"] else {
            Issue.record("attributeAdd answered \(r)")
            return ([], false)
        }
        return (Array(ref), replaced)
    }

    func search(_ t: TemporaryStore, _ pairs: [String: String], exact: Bool = false,
                scope: AccessScope = TemporaryStore.app) throws -> [[UInt8]] {
        try t.store.attributeIndex.search(collection: Self.login, exact: exact, pairs: try SecretServiceAttributes(pairs), scope: scope)
            .compactMap { if case .data(let d)? = $0["v_PersistentRef"] { Array(d) } else { nil } }
    }

    func rowid(_ t: TemporaryStore, _ ref: [UInt8]) throws -> Int64 {
        try t.store.database.query("SELECT rowid FROM items WHERE persistref = ?", [.blob(Array(ref.dropFirst(4)))]) { (s) throws(KeychainError) in
            _ = try s.step()
            return s.int(0)
        }
    }

    func indexRows(_ t: TemporaryStore) throws -> Int {
        try t.store.database.query("SELECT count(*) FROM item_attributes") { (s) throws(KeychainError) in
            _ = try s.step()
            return Int(s.int(0))
        }
    }

    // MARK: the encoding

    @Test func theEncodingIsCanonicalAndItsDecoderRefusesAnythingElse() throws {
        let set = try SecretServiceAttributes(["b": "2", "a": "1", "é": "3"])
        #expect(set.pairs.map(\.name) == ["a", "b", "é"])
        #expect(try SecretServiceAttributes(encoded: set.encoded) == set)
        #expect(set.encoded.prefix(4) == [3, 0, 0, 0])
        func encoding(_ pairs: [(String, String)], trailing: [UInt8] = []) -> [UInt8] {
            var w = ByteWriter()
            w.u32(UInt32(pairs.count))
            for (n, v) in pairs { w.lengthPrefixed(Array(n.utf8)); w.lengthPrefixed(Array(v.utf8)) }
            return w.bytes + trailing
        }
        for bad in [encoding([("b", "1"), ("a", "2")]), encoding([("a", "1"), ("a", "2")]),
                    encoding([("a", "1")], trailing: [0]), Array(encoding([("a", "1")]).dropLast())] {
            #expect(throws: KeychainError(.param, "")) { try SecretServiceAttributes(encoded: bad) }
        }
        // Canonically equivalent names with different bytes would be one key in a dictionary.
        #expect(throws: KeychainError(.param, "")) { try SecretServiceAttributes(encoded: encoding([("e\u{301}", "1"), ("é", "2")])) }
    }

    @Test func theLimitsAreErrSecParam() {
        let many = Dictionary(uniqueKeysWithValues: (0...SecretServiceAttributes.maxPairs).map { ("k\($0)", "v") })
        #expect(throws: KeychainError(.param, "")) { try SecretServiceAttributes(many) }
        #expect(throws: KeychainError(.param, "")) { try SecretServiceAttributes([String(repeating: "n", count: 1025): "v"]) }
        #expect(throws: KeychainError(.param, "")) { try SecretServiceAttributes(["n": String(repeating: "v", count: 64 << 10)]) }
        #expect(throws: Never.self) { try SecretServiceAttributes(["n": String(repeating: "v", count: 60 << 10)]) }
    }

    @Test func anInvalidXsatIsRefusedOnEveryCall() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["xsat": .data([1, 0, 0, 0])])) }
        expectStatus(.param) { try t.add(genp("s", "a", ["xsct": .string(String(repeating: "x", count: 256))])) }
        try t.add(genp("s", "a", ["xsat": .data(try SecretServiceAttributes(["k": "v"]).encoded), "xsct": .string("text/plain")]))
        #expect(try t.attributes(genp("s", "a"))?["xsct"] == .string("text/plain"))
    }

    // MARK: the index

    @Test func eachItemHasOneIndexRowPerPairAndOneForTheSetAndTheyGoWithIt() throws {
        let t = try TemporaryStore()
        let a = try add(t, ["service": "mail", "user": "alice"])
        let b = try add(t, [:])
        #expect(try t.store.table.attributeRowCount(item: try rowid(t, a.ref)) == 3)
        #expect(try t.store.table.attributeRowCount(item: try rowid(t, b.ref)) == 1)
        // An update that changes the attributes rewrites the rows.
        try t.store.items.update(["v_PersistentRef": .data(a.ref)], changes: ["xsat": .data(try SecretServiceAttributes(["only": "one"]).encoded)],
                           scope: TemporaryStore.app)
        #expect(try t.store.table.attributeRowCount(item: try rowid(t, a.ref)) == 2)
        #expect(try search(t, ["user": "alice"]).isEmpty)
        #expect(try search(t, ["only": "one"]) == [a.ref])
        try t.store.items.delete(["v_PersistentRef": .data(a.ref)], scope: TemporaryStore.app)
        #expect(try indexRows(t) == 1)
        try t.store.items.delete(["class": .string("genp"), "svce": .string("secret-service:login")], scope: TemporaryStore.app)
        #expect(try indexRows(t) == 0)
    }

    @Test func erasingTheKeychainClearsTheIndex() throws {
        let t = try TemporaryStore()
        try add(t, ["a": "1"])
        try t.store.erase()
        #expect(try indexRows(t) == 0)
    }

    @Test func removingThePasscodeDeletesThisDeviceOnlyItemsAndTheirRows() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        try add(t, ["a": "1"], pdmn: "akpu")
        #expect(try indexRows(t) == 2)
        try t.store.removePasscode(current: bytes("1234"))
        #expect(try indexRows(t) == 0)
    }

    @Test func searchFindsItemsHoldingEveryPairOrExactlyTheSet() throws {
        let t = try TemporaryStore()
        let a = try add(t, ["xdg:schema": "s", "user": "alice", "server": "x"])
        let b = try add(t, ["xdg:schema": "s", "user": "bob"])
        _ = try t.store.attributeIndex.add(try item(["xdg:schema": "s"], collection: "other"), replace: false, scope: TemporaryStore.app)
        #expect(Set(try search(t, ["xdg:schema": "s"])) == [a.ref, b.ref])
        #expect(try search(t, ["xdg:schema": "s", "user": "alice"]) == [a.ref])
        #expect(try search(t, ["user": "alice", "server": "y"]).isEmpty)
        #expect(try search(t, ["xdg:schema": "s", "user": "bob"], exact: true) == [b.ref])
        #expect(try search(t, ["xdg:schema": "s"], exact: true).isEmpty)
        #expect(Set(try search(t, [:])) == [a.ref, b.ref])
        // Other groups see none of them.
        #expect(try search(t, ["xdg:schema": "s"], scope: AccessScope(groups: ["other.app"])).isEmpty)
    }

    /// A pair's hash covers its split: name "ab" value "c" is not name "a" value "bc".
    @Test func aPairIsNotFoundUnderAnotherSplitOfItsBytes() throws {
        let t = try TemporaryStore()
        try add(t, ["ab": "c"])
        #expect(try search(t, ["a": "bc"]).isEmpty)
    }

    @Test func lockedItemsAreListedUnopenedAndCannotBeReplaced() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        let a = try add(t, ["k": "v"], pdmn: "ak")
        t.store.lock()
        let rows = try t.store.attributeIndex.search(collection: Self.login, exact: false, pairs: try SecretServiceAttributes(["k": "v"]),
                                               scope: TemporaryStore.app)
        #expect(rows.count == 1 && rows.first?["locked"] == .bool(true) && rows.first?["v_PersistentRef"] == .data(a.ref))
        expectStatus(.interactionNotAllowed) { try add(t, ["k": "v"], replace: true, pdmn: "ak") }
    }

    /// An item that asks the person first (issue 29), made by any keychain client with a
    /// Secret Service service: the bridge has no prompt of its own, so the index lists it
    /// locked, however it is searched for, and op 48 (GetSecrets) leaves its secret out. Before
    /// this, op 48 handed that secret to any caller of the bridge without asking.
    @Test func anItemThatAsksFirstIsLockedToTheBridgeAndGetSecretsLeavesItOut() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        var d = try item(["k": "v"])
        d["pdmn"] = nil
        d["accc"] = .string("ak;1")
        try t.add(d)
        let rows = try t.store.attributeIndex.search(collection: Self.login, exact: false, pairs: try SecretServiceAttributes([:]),
                                                     scope: TemporaryStore.app)
        let ref = try #require(rows.first?["v_PersistentRef"]?.bytesValue.map { Array($0) })
        #expect(rows.count == 1 && rows.first?["locked"] == .bool(true))
        let found = try t.store.attributeIndex.search(collection: Self.login, exact: false, pairs: try SecretServiceAttributes(["k": "v"]),
                                                      scope: TemporaryStore.app)
        #expect(found.count == 1 && found.first?["locked"] == .bool(true))
        #expect(try t.store.attributeIndex.secrets(of: [ref], scope: TemporaryStore.app).isEmpty)
    }

    /// attributeAdd takes accc, so items the bridge creates can ask first (its --require).
    @Test func attributeAddTakesAnAccessControlThatAsksFirst() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        var d = try item(["k": "v"])
        d["pdmn"] = nil
        d["accc"] = .string("ak;1")
        let added = try t.store.attributeIndex.add(d, replace: false, scope: TemporaryStore.app)
        let ref = try #require(added["v_PersistentRef"]?.bytesValue.map { Array($0) })
        #expect(try t.attributes(["v_PersistentRef": .data(ref)])?["accc"] == .string("ak;1"))
        #expect(try t.store.attributeIndex.secrets(of: [ref], scope: TemporaryStore.app).isEmpty)
        // Replacing it would change its secret without asking: refused as for a locked item.
        expectStatus(.interactionNotAllowed) { _ = try t.store.attributeIndex.add(d, replace: true, scope: TemporaryStore.app) }
    }

    /// The index rows are not authenticated: a row pointing a hash at another item must not
    /// make that item match.
    @Test func anIndexRowMovedToAnotherItemDoesNotMakeItMatch() throws {
        let t = try TemporaryStore()
        let a = try add(t, ["user": "alice"])
        let b = try add(t, ["user": "bob"])
        let (ra, rb) = (try rowid(t, a.ref), try rowid(t, b.ref))
        try t.store.database.run("UPDATE item_attributes SET item = ? WHERE item = ?", [.int(rb), .int(ra)])
        #expect(try search(t, ["user": "alice"]).isEmpty)
        #expect(try search(t, ["user": "bob"]) == [b.ref])
    }

    // MARK: replace

    @Test func replaceRewritesTheFirstItemWithTheSameSetAndKeepsItsIdentity() throws {
        let t = try TemporaryStore()
        let first = try add(t, ["k": "v"], secret: "one")
        t.clock.now += 100
        let second = try add(t, ["k": "v"], secret: "two", replace: true)
        #expect(second.replaced && second.ref == first.ref)
        #expect(try t.secret(["v_PersistentRef": .data(first.ref)]) == bytes("two"))
        let attributes = try #require(try t.attributes(["v_PersistentRef": .data(first.ref)]))
        #expect(attributes["cdat"] != attributes["mdat"])
        #expect(try indexRows(t) == 2)
        // Without replace, or with another set, a new item.
        #expect(try add(t, ["k": "v"], secret: "three").ref != first.ref)
        #expect(try !add(t, ["k": "v", "x": "y"], replace: true).replaced)
    }

    @Test func attributeAddRefusesWhatIsNotASecretServiceItem() throws {
        let t = try TemporaryStore()
        var d = try item(["k": "v"])
        d["acct"] = .string("mine")
        expectStatus(.param) { _ = try t.store.attributeIndex.add(d, replace: false, scope: TemporaryStore.app) }
        d = try item(["k": "v"])
        d["svce"] = .string("not-secret-service")
        expectStatus(.param) { _ = try t.store.attributeIndex.add(d, replace: false, scope: TemporaryStore.app) }
        d = try item(["k": "v"])
        d["xsat"] = nil
        expectStatus(.param) { _ = try t.store.attributeIndex.add(d, replace: false, scope: TemporaryStore.app) }
    }

    // MARK: backup

    @Test func aBackupCarriesTheAttributesAndARestoreRebuildsTheIndex() throws {
        let t = try TemporaryStore()
        try add(t, ["user": "alice"], secret: "a")
        let exported = try t.store.backupExporter.migratableItems().items
        let target = try TemporaryStore()
        #expect(try target.store.restorer.importItems(exported, onConflict: .fail).restored == 1)
        let found = try search(target, ["user": "alice"])
        #expect(found.count == 1)
        #expect(try target.secret(["v_PersistentRef": .data(found[0])]) == bytes("a"))
        var bad = exported[0]
        bad["xsat"] = .data([9, 9])
        expectStatus(.decode) { _ = try TemporaryStore().store.restorer.importItems([bad], onConflict: .fail) }
    }

    // MARK: portal

    @Test func aPortalSecretIsMadeOnceAndKeptInTheAppsOwnGroup() throws {
        let t = try TemporaryStore()
        let first = try t.store.portalSecrets.secret(appID: "org.example.App")
        #expect(first.count == 64)
        #expect(try t.store.portalSecrets.secret(appID: "org.example.App") == first)
        #expect(try t.store.portalSecrets.secret(appID: "org.example.Other") != first)
        #expect(try t.count(["class": .string("genp")], scope: AccessScope(groups: ["portal.org.example.App"])) == 1)
        #expect(try t.count(["class": .string("genp")]) == 0)
        expectStatus(.param) { _ = try t.store.portalSecrets.secret(appID: "") }
        expectStatus(.param) { _ = try t.store.portalSecrets.secret(appID: "a b") }
    }

    // MARK: cost

    /// The search's plan: every table reached through an index, no scan, no sort.
    @Test(arguments: [(1, 1), (2, 1), (3, 4)])
    func theSearchPlanSearchesIndexesAndNeverScans(hashes: Int, groups: Int) throws {
        let t = try TemporaryStore()
        let sql = ItemTable.attributeSearchSQL(hashes: hashes, groups: groups)
        let plan = try t.store.database.query("EXPLAIN QUERY PLAN " + sql, Array(repeating: SQLValue.blob([0]), count: hashes + 1 + groups)) {
            (s) throws(KeychainError) -> [String] in
            var lines: [String] = []
            while try s.step() { lines.append(s.text(3)) }
            return lines
        }
        #expect(!plan.isEmpty)
        #expect(plan.allSatisfy { !$0.hasPrefix("SCAN") && !$0.contains("TEMP B-TREE") }, "\(plan)")
        // d is the driving index row (its table's primary key is (hash, item)).
        #expect(plan.contains { $0.hasPrefix("SEARCH d USING PRIMARY KEY (hash=?)") }, "\(plan)")
        #expect(plan.filter { $0.hasPrefix("SEARCH o ") }.count == hashes - 1, "\(plan)")
    }
}
