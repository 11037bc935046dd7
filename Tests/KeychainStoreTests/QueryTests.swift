import KeychainModel
@testable import KeychainStore
import Testing
import StoreTestSupport

@Suite("CopyMatching: matching and result shapes")
struct QueryTests {
    /// Three items in service "s" (accounts a, b, c) with secrets [1], [2], [3].
    func threeItems() throws -> TemporaryStore {
        let t = try TemporaryStore()
        for (i, account) in ["a", "b", "c"].enumerated() {
            try t.add(genp("s", account, ["v_Data": .data([UInt8(i + 1)]), "desc": .string(i == 0 ? "first" : "other")]))
        }
        return t
    }

    @Test func defaultMatchLimitReturnsOneObjectNotAnArray() throws {
        let t = try threeItems()
        let result = try t.copy(["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true)])
        guard case .single(.data) = result else {
            Issue.record("expected a single data object, got \(result)")
            return
        }
    }

    @Test func matchLimitAllReturnsAnArrayOfEveryMatch() throws {
        let t = try threeItems()
        let result = try t.copy(["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true),
                                 "m_Limit": .string("m_LimitAll")])
        #expect(result == .list([.data([1]), .data([2]), .data([3])]))
    }

    @Test func numericMatchLimitOfOneIsSingleAndOfTwoIsAnArray() throws {
        let t = try threeItems()
        let q: AttributeDictionary = ["class": .string("genp"), "r_Data": .bool(true)]
        guard case .single = try t.copy(q.merging(["m_Limit": .int(1)]) { $1 }) else {
            Issue.record("limit 1 should be a single object")
            return
        }
        guard case .list(let two) = try t.copy(q.merging(["m_Limit": .int(2)]) { $1 }) else {
            Issue.record("limit 2 should be an array")
            return
        }
        #expect(two.count == 2)
    }

    @Test func arrayOfOneWhenLimitAllMatchesOneItem() throws {
        let t = try threeItems()
        let result = try t.copy(genp("s", "b", ["r_Data": .bool(true), "m_Limit": .string("m_LimitAll")]))
        #expect(result == .list([.data([2])]))
    }

    @Test func noReturnKeysGivesStatusOnly() throws {
        let t = try threeItems()
        #expect(try t.copy(genp("s", "a")) == .none)
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "zzz")) }
    }

    @Test func dataAndAttributesTogetherGiveOneDictionaryWithValueData() throws {
        let t = try threeItems()
        let result = try t.copy(genp("s", "b", ["r_Data": .bool(true), "r_Attributes": .bool(true)]))
        guard case .single(.attributes(let dict)) = result else {
            Issue.record("expected a dictionary, got \(result)")
            return
        }
        #expect(dict["v_Data"] == .data([2]))
        #expect(dict["acct"] == .string("b"))
    }

    @Test func persistentRefFindsTheItemAgain() throws {
        let t = try threeItems()
        guard case .single(.persistentRef(let ref)) = try t.copy(genp("s", "c", ["r_PersistentRef": .bool(true)])) else {
            Issue.record("no persistent ref")
            return
        }
        #expect(ref.count == 20 && ref.prefix(4) == ArraySlice(bytes("genp")))
        #expect(try t.copy(["v_PersistentRef": .data(ref), "r_Data": .bool(true)]) == .single(.data([3])))
    }

    @Test func persistentRefStaysValidAcrossAnUpdateOfThePrimaryKey() throws {
        let t = try threeItems()
        guard case .single(.persistentRef(let ref)) = try t.copy(genp("s", "c", ["r_PersistentRef": .bool(true)])) else {
            Issue.record("no persistent ref")
            return
        }
        try t.store.items.update(genp("s", "c"), changes: ["acct": .string("renamed")], scope: TemporaryStore.app)
        let attrs = try #require(try t.attributes(["v_PersistentRef": .data(ref)]))
        #expect(attrs["acct"] == .string("renamed"))
    }

    @Test func persistentIDsSortByCreationTimeAndStayDistinct() {
        let earlier = PersistentID.make(at: 785_000_000.000)
        let later = PersistentID.make(at: 785_000_000.002)
        let sameMoment = PersistentID.make(at: 785_000_000.002)
        #expect(earlier.count == 16 && later.count == 16)
        #expect(earlier.lexicographicallyPrecedes(later))
        #expect(later.prefix(6) == sameMoment.prefix(6))
        #expect(later != sameMoment)
    }

    @Test func persistentRefWithOtherAttributesIsAParameterError() throws {
        let t = try threeItems()
        guard case .single(.persistentRef(let ref)) = try t.copy(genp("s", "c", ["r_PersistentRef": .bool(true)])) else {
            Issue.record("expected a persistent reference")
            return
        }
        expectStatus(.param) { _ = try t.copy(["v_PersistentRef": .data(ref), "acct": .string("c")]) }
    }

    @Test func persistentRefAndDataInOneDictionary() throws {
        let t = try threeItems()
        let result = try t.copy(genp("s", "a", ["r_PersistentRef": .bool(true), "r_Data": .bool(true)]))
        guard case .single(.attributes(let dict)) = result else {
            Issue.record("expected a dictionary, got \(result)")
            return
        }
        #expect(dict.keys.sorted() == ["v_Data", "v_PersistentRef"])
    }

    @Test func refForPasswordsIsNullAndForCertificatesUnimplemented() throws {
        let t = try threeItems()
        #expect(try t.copy(genp("s", "a", ["r_Ref": .bool(true)])) == .none)
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        expectStatus(.unimplemented) { _ = try t.copy(["class": .string("cert"), "r_Ref": .bool(true)]) }
    }

    @Test func attributeWithoutAColumnMatchesAfterDecryption() throws {
        let t = try threeItems()
        #expect(try t.count(["class": .string("genp"), "desc": .string("other")]) == 2)
        #expect(try t.secret(["class": .string("genp"), "desc": .string("first")]) == [1])
    }

    @Test func matchingIsExactAndCaseSensitiveEvenWithCaseInsensitiveOption() throws {
        let t = try threeItems()
        expectStatus(.itemNotFound) { _ = try t.copy(genp("S", "a", ["m_CaseInsensitive": .bool(true)])) }
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "")) }
    }

    @Test func accountGivenAsDataMatchesAccountStoredAsString() throws {
        let t = try threeItems()
        #expect(try t.secret(["class": .string("genp"), "svce": .string("s"), "acct": .data(bytes("b"))]) == [2])
    }

    @Test func valueKeepsTheTypeItWasStoredWith() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .data([0xFF, 0x00])])
        let attrs = try #require(try t.attributes(["class": .string("genp"), "svce": .string("s")]))
        #expect(attrs["acct"] == .data([0xFF, 0x00]))
        #expect(attrs["svce"] == .string("s"))
    }

    @Test func valueDataInASearchDoesNotFilter() throws {
        let t = try threeItems()
        #expect(try t.secret(genp("s", "a", ["v_Data": .data(bytes("not the secret"))])) == [1])
    }

    @Test func absentSynchronizableMatchesOnlyLocalItemsAndAnyMatchesBoth() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([0])]))
        try t.add(genp("s", "a", ["v_Data": .data([1]), "sync": .bool(true)]))
        try t.add(genp("s", "only-synced", ["sync": .int(1)]))
        #expect(try t.count(["class": .string("genp")]) == 1)
        #expect(try t.count(["class": .string("genp"), "sync": .string("syna")]) == 3)
        #expect(try t.count(["class": .string("genp"), "sync": .bool(true)]) == 2)
    }

    @Test func accessibilityFilters() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["pdmn": .string("ak")]))
        try t.add(genp("s", "b", ["pdmn": .string("ck")]))
        #expect(try t.count(["class": .string("genp"), "pdmn": .string("ck")]) == 1)
        #expect(try t.attributes(["class": .string("genp"), "pdmn": .string("ck")])?["acct"] == .string("b"))
    }

    @Test func defaultAccessibilityIsWhenUnlockedExceptCertificatesAlways() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(["class": .string("inet"), "srvr": .string("h")])
        try t.add(["class": .string("keys"), "atag": .string("k")])
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        for cls in ["genp", "inet", "keys"] {
            #expect(try t.attributes(["class": .string(cls)])?["pdmn"] == .string("ak"))
        }
        #expect(try t.attributes(["class": .string("cert")])?["pdmn"] == .string("dk"))
    }

    @Test func searchingOneClassNeverReturnsAnother() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(["class": .string("inet"), "acct": .string("a")])
        #expect(try t.count(["class": .string("genp"), "acct": .string("a")]) == 1)
        #expect(try t.count(["class": .string("inet"), "acct": .string("a")]) == 1)
    }

    @Test func addReturnsTheResultItsReturnKeysAskFor() throws {
        let t = try TemporaryStore()
        let result = try t.add(genp("s", "a", ["v_Data": .data([7]), "r_Attributes": .bool(true)]))
        guard case .single(.attributes(let attrs)) = result else {
            Issue.record("expected attributes, got \(result)")
            return
        }
        #expect(attrs["acct"] == .string("a"))
        #expect(try t.add(genp("s", "b")) == .none)
    }
}
