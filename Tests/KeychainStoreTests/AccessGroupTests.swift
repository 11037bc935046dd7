import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

@Suite("Access groups confine every call")
struct AccessGroupTests {
    let appA = AccessScope(groups: ["a.private", "shared"])
    let appB = AccessScope(groups: ["b.private", "shared"])

    @Test func itemsWithoutAGroupGoToTheCallersFirstGroup() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "x"), scope: appA)
        #expect(try t.attributes(genp("s", "x"), scope: appA)?["agrp"] == .string("a.private"))
    }

    @Test func anotherAppsPrivateItemsAreInvisible() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "x", ["v_Data": .data([1])]), scope: appA)
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "x"), scope: appB) }
        expectStatus(.itemNotFound) { try t.store.items.update(genp("s", "x"), changes: ["labl": .string("l")], scope: appB) }
        expectStatus(.itemNotFound) { try t.store.items.delete(genp("s", "x"), scope: appB) }
        #expect(try t.secret(genp("s", "x"), scope: appA) == [1])
    }

    @Test func namingAGroupOutsideTheCallersListIsMissingEntitlement() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "x"), scope: appA)
        let foreign = genp("s", "x", ["agrp": .string("a.private")])
        expectStatus(.missingEntitlement) { _ = try t.copy(foreign, scope: appB) }
        expectStatus(.missingEntitlement) { try t.add(genp("s", "y", ["agrp": .string("a.private")]), scope: appB) }
        expectStatus(.missingEntitlement) { try t.store.items.delete(foreign, scope: appB) }
        expectStatus(.missingEntitlement) { try t.store.items.update(foreign, changes: ["labl": .string("l")], scope: appB) }
    }

    @Test func movingAnItemIntoAForeignGroupIsMissingEntitlement() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "x"), scope: appA)
        expectStatus(.missingEntitlement) {
            try t.store.items.update(genp("s", "x"), changes: ["agrp": .string("b.private")], scope: appA)
        }
    }

    @Test func bothAppsUseTheSharedGroup() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "x", ["agrp": .string("shared"), "v_Data": .data([5])]), scope: appA)
        #expect(try t.secret(genp("s", "x"), scope: appB) == [5])
        try t.store.items.update(genp("s", "x"), changes: ["v_Data": .data([6])], scope: appB)
        #expect(try t.secret(genp("s", "x"), scope: appA) == [6])
    }

    @Test func aCallerWithNoGroupsCanDoNothing() throws {
        let t = try TemporaryStore()
        let none = AccessScope(groups: [])
        expectStatus(.missingEntitlement) { try t.add(genp("s", "x"), scope: none) }
        expectStatus(.missingEntitlement) { _ = try t.copy(genp("s", "x"), scope: none) }
    }
}
