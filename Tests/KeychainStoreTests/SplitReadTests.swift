import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

/// The store as a split read reaches it, counting the holds a read takes.
final class CountingLookup: StoreLookup {
    let store: ItemStore
    private(set) var holds = 0

    init(_ store: ItemStore) { self.store = store }

    func lookup<T: Sendable>(_ body: (ItemStore) throws(KeychainError) -> T) throws(KeychainError) -> T {
        holds += 1
        return try body(store)
    }
}

@Suite("The one CopyMatching, split around the lock")
struct SplitReadTests {
    /// The answer, with a list's pages joined, and each page's size.
    func split(_ t: TemporaryStore, _ query: AttributeDictionary, scope: AccessScope = TemporaryStore.app,
               lookup: CountingLookup? = nil) throws -> (answer: QueryResult, pages: [Int]) {
        var results: [ItemResult] = []
        var pages: [Int] = []
        let answer = try t.store.splitReader.copyMatching(query, scope: scope, store: lookup ?? CountingLookup(t.store)) { page in
            results += page
            pages.append(page.count)
        }
        guard case .list = answer else { return (answer, pages) }
        return (.list(results), pages)
    }

    func threeItems() throws -> TemporaryStore {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1]), "desc": .string("first")]))
        try t.add(genp("s", "b", ["v_Data": .data([2]), "desc": .string("second")]))
        try t.add(genp("s", "c", ["v_Data": .data([3])]))
        return t
    }

    @Test func aSingleAnswerIsTheFirstMatchInOneLookup() throws {
        let t = try threeItems()
        let lookup = CountingLookup(t.store)
        let (answer, pages) = try split(t, ["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true)], lookup: lookup)
        #expect(answer == .single(.data([1])))
        #expect(pages.isEmpty)
        #expect(lookup.holds == 1)
    }

    @Test func anAttributeWithoutAColumnIsMatchedAfterDecryption() throws {
        let t = try threeItems()
        let (answer, _) = try split(t, ["class": .string("genp"), "desc": .string("second"), "r_Data": .bool(true)])
        #expect(answer == .single(.data([2])))
    }

    @Test func aListAnswerHoldsEveryMatchUpToItsLimit() throws {
        let t = try threeItems()
        let all = try split(t, ["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true), "m_Limit": .string("m_LimitAll")])
        #expect(all.answer == .list([.data([1]), .data([2]), .data([3])]))
        let two = try split(t, ["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true), "m_Limit": .int(2)])
        #expect(two.answer == .list([.data([1]), .data([2])]))
    }

    @Test func aQueryAskingForNothingBackAnswersNone() throws {
        let t = try threeItems()
        #expect(try split(t, ["class": .string("genp"), "svce": .string("s")]).answer == QueryResult.none)
        #expect(try split(t, ["class": .string("genp"), "svce": .string("s"), "m_Limit": .string("m_LimitAll")]).answer == .list([]))
    }

    @Test func aLongListComesInPagesEachItsOwnLookup() throws {
        let t = try TemporaryStore()
        for n in 0..<300 { try t.add(genp("s", "a\(n)", ["v_Data": .data([1])])) }
        let lookup = CountingLookup(t.store)
        let (answer, pages) = try split(t, ["class": .string("genp"), "r_PersistentRef": .bool(true), "m_Limit": .string("m_LimitAll")],
                                        lookup: lookup)
        guard case .list(let results) = answer else { Issue.record("not a list"); return }
        #expect(results.count == 300)
        #expect(pages == [256, 44])
        #expect(lookup.holds == 2)
    }

    @Test func noMatchIsItemNotFoundAndAForeignGroupMissingEntitlement() throws {
        let t = try threeItems()
        expectStatus(.itemNotFound) { _ = try split(t, genp("s", "zzz")) }
        expectStatus(.itemNotFound) { _ = try split(t, genp("s", "zzz", ["m_Limit": .string("m_LimitAll")])) }
        expectStatus(.missingEntitlement) { _ = try split(t, genp("s", "a", ["agrp": .string("other")])) }
    }

    @Test func anIdentitySearchIsOneLookup() throws {
        let t = try TemporaryStore()
        let lookup = CountingLookup(t.store)
        expectStatus(.itemNotFound) { _ = try split(t, ["class": .string("idnt")], lookup: lookup) }
        #expect(lookup.holds == 1)
    }

    @Test func anAlteredRowInsideTheSQLLimitIsPassedByASecondLookupOfEveryRow() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.add(genp("s", "b", ["v_Data": .data([2])]))
        try t.editFile { try $0.execute("UPDATE items SET data = X'0102' WHERE rowid = (SELECT min(rowid) FROM items)") }
        let query = genp("s", "x").filter { $0.key != "acct" }.merging(["r_Data": .bool(true)]) { $1 }
        let lookup = CountingLookup(t.store)
        #expect(try split(t, query, lookup: lookup).answer == .single(.data([2])))
        #expect(lookup.holds == 2)
    }

    @Test func onlyAlteredRowsAreErrSecDecode() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.editFile { try $0.execute("UPDATE items SET data = X'0102'") }
        expectStatus(.decode) { _ = try split(t, genp("s", "a", ["r_Data": .bool(true)])) }
        expectStatus(.decode) { _ = try split(t, genp("s", "a", ["r_Data": .bool(true), "m_Limit": .string("m_LimitAll")])) }
    }

    @Test func aLockedRowFailsTheWholeSearch() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["pdmn": .string("dk")]))
        try t.add(genp("s", "b", ["pdmn": .string("ak")]))
        try t.store.setPasscode(bytes("pin"))
        try t.reopen()
        expectStatus(.interactionNotAllowed) {
            _ = try split(t, ["class": .string("genp"), "m_Limit": .string("m_LimitAll"), "r_Data": .bool(true)])
        }
        #expect(try split(t, genp("s", "a", ["r_Data": .bool(true)])).answer == .single(.data([])))
    }
}
