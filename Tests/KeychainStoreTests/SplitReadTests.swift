import KeychainModel
import KeychainStore
import Testing

@Suite("A search split around the lock answers as copyMatching does")
struct SplitReadTests {
    func split(_ t: TemporaryStore, _ query: AttributeDictionary, scope: AccessScope = TemporaryStore.app) throws -> QueryResult? {
        guard let prepared = try t.store.splitReader.prepareSearch(query, scope: scope) else { return nil }
        return try t.store.splitReader.finish(prepared, try t.store.fetch(prepared))
    }

    @Test(arguments: [
        ["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true)],
        ["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true), "m_Limit": .string("m_LimitAll")],
        ["class": .string("genp"), "acct": .string("b"), "r_Attributes": .bool(true), "r_Data": .bool(true)],
        ["class": .string("genp"), "desc": .string("second"), "r_PersistentRef": .bool(true)],
        ["class": .string("genp"), "svce": .string("s"), "m_Limit": .int(2), "r_Attributes": .bool(true)],
        ["class": .string("genp"), "svce": .string("s")],
    ] as [AttributeDictionary])
    func sameResultAsCopyMatching(query: AttributeDictionary) throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1]), "desc": .string("first")]))
        try t.add(genp("s", "b", ["v_Data": .data([2]), "desc": .string("second")]))
        try t.add(genp("s", "c", ["v_Data": .data([3])]))
        #expect(try split(t, query) == t.copy(query))
    }

    @Test func noMatchIsItemNotFoundAndAForeignGroupMissingEntitlement() throws {
        let t = try TemporaryStore()
        expectStatus(.itemNotFound) { _ = try split(t, genp("s", "zzz")) }
        expectStatus(.missingEntitlement) { _ = try split(t, genp("s", "a", ["agrp": .string("other")])) }
    }

    @Test func identitiesTakeTheGeneralPath() throws {
        let t = try TemporaryStore()
        #expect(try t.store.splitReader.prepareSearch(["class": .string("idnt")], scope: TemporaryStore.app) == nil)
    }

    @Test func anAlteredRowInsideTheSQLLimitSendsTheCallBackToTheGeneralPath() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.add(genp("s", "b", ["v_Data": .data([2])]))
        try t.editFile { try $0.execute("UPDATE items SET data = X'0102' WHERE rowid = (SELECT min(rowid) FROM items)") }
        let query = genp("s", "x").filter { $0.key != "acct" }.merging(["r_Data": .bool(true)]) { $1 }
        #expect(try split(t, query) == nil)
        #expect(try t.copy(query) == .single(.data([2])))
    }

    @Test func aLockedRowFailsTheWholeSplitSearch() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["pdmn": .string("dk")]))
        try t.add(genp("s", "b", ["pdmn": .string("ak")]))
        try t.store.setPasscode(bytes("pin"))
        try t.reopen()
        expectStatus(.interactionNotAllowed) {
            _ = try split(t, ["class": .string("genp"), "m_Limit": .string("m_LimitAll"), "r_Data": .bool(true)])
        }
        #expect(try split(t, genp("s", "a", ["r_Data": .bool(true)])) == .single(.data([])))
    }
}
