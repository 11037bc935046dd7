import KeychainModel
import Testing

/// The core SecItem behaviours, each checked on the in-process store and on the daemon through
/// the client (SecItemBackends.swift): the two must answer alike.
@Suite("SecItem behaviour, the same in process and through the daemon")
struct SecItemBehaviourTests {
    private func item(_ account: String, _ secret: String? = nil, _ extra: AttributeDictionary = [:]) -> AttributeDictionary {
        var d: AttributeDictionary = ["class": .string("genp"), "svce": .string("svc"), "acct": .string(account)]
        if let secret { d["v_Data"] = .data(bytes(secret)) }
        return d.merging(extra) { $1 }
    }

    private func secret(_ kc: any SecItemBackend, _ account: String) throws -> QueryResult {
        try kc.copyMatching(item(account, nil, ["r_Data": .bool(true)]))
    }

    @Test(arguments: Backend.allCases)
    func anAddedItemsSecretReadsBack(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        #expect(try secret(kc, "a") == .single(.data(bytes("one"))))
    }

    @Test(arguments: Backend.allCases)
    func addingTheSameServiceAndAccountAgainIsDuplicateItem(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        expectStatus(.duplicateItem) { try kc.add(item("a", "two", ["labl": .string("other label")])) }
        #expect(try secret(kc, "a") == .single(.data(bytes("one"))))
    }

    @Test(arguments: Backend.allCases)
    func anotherAccountIsAnotherItem(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        try kc.add(item("b", "two"))
        #expect(try secret(kc, "b") == .single(.data(bytes("two"))))
    }

    @Test(arguments: Backend.allCases)
    func noMatchIsItemNotFound(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        expectStatus(.itemNotFound) { _ = try secret(kc, "nobody") }
    }

    @Test(arguments: Backend.allCases)
    func withoutReturnKeysAMatchAnswersNothing(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        #expect(try kc.copyMatching(item("a")) == .none)
    }

    @Test(arguments: Backend.allCases)
    func dataAndAttributesTogetherAreOneDictionaryHoldingTheSecret(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one", ["labl": .string("L")]))
        guard case .single(.attributes(let a)) = try kc.copyMatching(item("a", nil, ["r_Data": .bool(true), "r_Attributes": .bool(true)])) else {
            Issue.record("expected one dictionary")
            return
        }
        #expect(a["v_Data"] == .data(bytes("one")))
        #expect(a["acct"] == .string("a"))
        #expect(a["labl"] == .string("L"))
    }

    @Test(arguments: Backend.allCases)
    func theDefaultLimitIsOneObjectEvenWhenSeveralMatch(_ backend: Backend) throws {
        let kc = try backend.make()
        for account in ["a", "b", "c"] { try kc.add(item(account, account)) }
        let result = try kc.copyMatching(["class": .string("genp"), "svce": .string("svc"), "r_Data": .bool(true)])
        guard case .single(.data) = result else {
            Issue.record("expected one data object, got \(result)")
            return
        }
    }

    @Test(arguments: Backend.allCases)
    func limitAllIsAListOfEveryMatchAndANumberCapsIt(_ backend: Backend) throws {
        let kc = try backend.make()
        for account in ["a", "b", "c"] { try kc.add(item(account, account)) }
        let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("svc"), "r_Attributes": .bool(true)]
        guard case .list(let all) = try kc.copyMatching(query.merging(["m_Limit": .string("m_LimitAll")]) { $1 }),
              case .list(let two) = try kc.copyMatching(query.merging(["m_Limit": .int(2)]) { $1 }) else {
            Issue.record("expected lists")
            return
        }
        let accounts = all.compactMap { if case .attributes(let a) = $0 { a["acct"] } else { nil } }
        #expect(Set(accounts) == [.string("a"), .string("b"), .string("c")])
        #expect(two.count == 2)
    }

    @Test(arguments: Backend.allCases)
    func updateReplacesTheSecret(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        try kc.update(item("a"), ["v_Data": .data(bytes("two"))])
        #expect(try secret(kc, "a") == .single(.data(bytes("two"))))
    }

    @Test(arguments: Backend.allCases)
    func updateRenamesAnItemByItsPrimaryKey(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        try kc.update(item("a"), ["acct": .string("renamed")])
        expectStatus(.itemNotFound) { _ = try secret(kc, "a") }
        #expect(try secret(kc, "renamed") == .single(.data(bytes("one"))))
    }

    @Test(arguments: Backend.allCases)
    func updateOntoAnotherItemsPrimaryKeyIsDuplicateItemAndChangesNothing(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        try kc.add(item("b", "two"))
        expectStatus(.duplicateItem) { try kc.update(item("a"), ["acct": .string("b"), "v_Data": .data(bytes("three"))]) }
        #expect(try secret(kc, "a") == .single(.data(bytes("one"))))
        #expect(try secret(kc, "b") == .single(.data(bytes("two"))))
    }

    @Test(arguments: Backend.allCases)
    func updateWithNoMatchIsItemNotFound(_ backend: Backend) throws {
        let kc = try backend.make()
        expectStatus(.itemNotFound) { try kc.update(item("a"), ["labl": .string("L")]) }
    }

    @Test(arguments: Backend.allCases)
    func deleteRemovesEveryMatchAndNothingElse(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "1", ["labl": .string("old")]))
        try kc.add(item("b", "2", ["labl": .string("old")]))
        try kc.add(item("c", "3"))
        try kc.delete(["class": .string("genp"), "labl": .string("old")])
        expectStatus(.itemNotFound) { _ = try secret(kc, "a") }
        expectStatus(.itemNotFound) { _ = try secret(kc, "b") }
        #expect(try secret(kc, "c") == .single(.data(bytes("3"))))
    }

    @Test(arguments: Backend.allCases)
    func deleteWithNoMatchIsItemNotFound(_ backend: Backend) throws {
        let kc = try backend.make()
        expectStatus(.itemNotFound) { try kc.delete(item("a")) }
    }

    @Test(arguments: Backend.allCases)
    func anItemWithoutAGroupGoesToTheCallersFirstGroup(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one"))
        guard case .single(.attributes(let a)) = try kc.copyMatching(item("a", nil, ["r_Attributes": .bool(true)])) else {
            Issue.record("expected attributes")
            return
        }
        #expect(a["agrp"] == .string(Backend.groups[0]))
    }

    @Test(arguments: Backend.allCases)
    func anItemInTheCallersOtherGroupIsFoundWithoutNamingIt(_ backend: Backend) throws {
        let kc = try backend.make()
        try kc.add(item("a", "one", ["agrp": .string(Backend.groups[1])]))
        #expect(try secret(kc, "a") == .single(.data(bytes("one"))))
    }

    @Test(arguments: Backend.allCases)
    func namingAGroupTheCallerIsNotInIsMissingEntitlement(_ backend: Backend) throws {
        let kc = try backend.make()
        let foreign: AttributeDictionary = ["agrp": .string("com.example.someone-else")]
        try kc.add(item("a", "one"))
        expectStatus(.missingEntitlement) { try kc.add(item("b", "two", foreign)) }
        expectStatus(.missingEntitlement) { _ = try kc.copyMatching(item("a", nil, foreign)) }
        expectStatus(.missingEntitlement) { try kc.update(item("a"), foreign) }
        expectStatus(.missingEntitlement) { try kc.delete(item("a", nil, foreign)) }
    }
}
