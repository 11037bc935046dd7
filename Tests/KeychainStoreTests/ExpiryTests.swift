import KeychainCrypto
import KeychainModel
import KeychainStorage
import StoreTestSupport
import Testing
@testable import KeychainStore

/// `expd`, keychaind's expiry attribute (docs/semantics.md, "Expiry"): past it an item is gone
/// to every read and to update, a delete still clears it, an add takes its place, and the
/// sweep deletes it, as a delete that sync carries.
@Suite("Expiry")
struct ExpiryTests {
    let scope = TemporaryStore.app

    /// A generic password that expires `after` seconds from the store's clock.
    func expiring(_ t: TemporaryStore, _ account: String, after: Double, _ extra: AttributeDictionary = [:]) -> AttributeDictionary {
        genp("s", account, ["v_Data": .data(bytes("secret-\(account)")), "expd": .date(t.clock.now + after)].merging(extra) { _, new in new })
    }

    func rows(_ t: TemporaryStore) throws -> Int {
        try t.store.database.query("SELECT count(*) FROM items", []) { (s) throws(KeychainError) in try s.step() ? Int(s.int(0)) : -1 }
    }

    @Test func anItemIsReturnedUntilItsExpiry() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 60))
        t.clock.now += 59
        #expect(try t.secret(genp("s", "a")) == bytes("secret-a"))
        #expect(try t.attributes(genp("s", "a"))?["expd"] == .date(t.clock.now + 1))
    }

    @Test func anExpiredItemIsNotFoundWhateverTheQueryAsksFor() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 60))
        t.clock.now += 60
        expectStatus(.itemNotFound) { _ = try t.secret(genp("s", "a")) }
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "a")) }
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "a", ["r_PersistentRef": .bool(true)])) }
        #expect(try t.count(["class": .string("genp")]) == 0)
    }

    @Test func aSingleAnswerSkipsAnExpiredFirstMatchForALaterOne() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 10))
        try t.add(genp("s", "b", ["v_Data": .data([2])]))
        t.clock.now += 10
        #expect(try t.secret(["class": .string("genp"), "svce": .string("s")]) == [2])
    }

    @Test func anItemExpiringDuringALongListIsNotReturnedFromTheLaterPage() throws {
        let t = try TemporaryStore()
        for n in 0..<300 { try t.add(genp("s", "a\(n)", ["v_Data": .data([1])])) }
        // The last page's item expires between the first page's lookup and the second's.
        try t.add(expiring(t, "late", after: 5))
        let lookup = ClockAdvancingLookup(t, by: 5)
        var results: [ItemResult] = []
        _ = try t.store.splitReader.copyMatching(["class": .string("genp"), "r_Attributes": .bool(true), "m_Limit": .string("m_LimitAll")],
                                                 scope: scope, store: lookup) { results += $0 }
        #expect(lookup.holds == 2)
        #expect(results.count == 300)
        #expect(!results.contains { if case .attributes(let a) = $0 { a["acct"] == .string("late") } else { false } })
    }

    @Test func anUpdateDoesNotMatchAnExpiredItem() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 1))
        t.clock.now += 1
        expectStatus(.itemNotFound) { try t.store.items.update(genp("s", "a"), changes: ["expd": .date(t.clock.now + 100)], scope: scope) }
    }

    @Test func aDeleteClearsAnExpiredItem() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 1))
        try t.add(expiring(t, "b", after: 1, ["desc": .string("d")]))
        t.clock.now += 1
        try t.store.items.delete(genp("s", "a"), scope: scope)
        try t.store.items.delete(["class": .string("genp"), "desc": .string("d")], scope: scope)
        #expect(try rows(t) == 0)
    }

    @Test func anAddTakesTheKeyOfAnExpiredItem() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 1))
        t.clock.now += 1
        try t.add(genp("s", "a", ["v_Data": .data(bytes("renewed"))]))
        #expect(try t.secret(genp("s", "a")) == bytes("renewed"))
        #expect(try rows(t) == 1)
    }

    @Test func anAddStillClashesWithALiveItem() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 2))
        t.clock.now += 1
        expectStatus(.duplicateItem) { try t.add(genp("s", "a")) }
    }

    @Test func anUpdateCanExtendALiveItemsExpiry() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 10))
        try t.store.items.update(genp("s", "a"), changes: ["expd": .date(t.clock.now + 100)], scope: scope)
        t.clock.now += 50
        #expect(try t.secret(genp("s", "a")) == bytes("secret-a"))
    }

    @Test func theSweepDeletesExpiredItemsOnly() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 10))
        try t.add(expiring(t, "b", after: 100))
        try t.add(genp("s", "c"))
        t.clock.now += 10
        #expect(try t.store.items.sweepExpired() == 1)
        #expect(try rows(t) == 2)
        #expect(try t.store.items.sweepExpired() == 0)
    }

    @Test func theSweepLeavesItemsOfALockedClassForTheirUnlock() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        try t.add(expiring(t, "a", after: 1, ["pdmn": .string("ak")]))
        t.store.lock()
        t.clock.now += 1
        #expect(try t.store.items.sweepExpired() == 0)
        try t.store.unlock(passcode: bytes("1234"))
        #expect(try t.store.items.sweepExpired() == 1)
    }

    @Test func theSweepsDeletionOfASyncedItemQueuesATombstone() throws {
        let t = try TemporaryStore()
        try t.add(expiring(t, "a", after: 1, ["sync": .int(1)]))
        try t.store.database.run("UPDATE items SET sync_writer = ?, sync_counter = 7", [.blob(Array(repeating: 0xAB, count: 16))])
        t.clock.now += 1
        #expect(try t.store.items.sweepExpired() == 1)
        let tombstones = try OutboxTable(t.store.database).entries().filter { if case .tombstone = $0.change { true } else { false } }
        #expect(tombstones.count == 1)
    }

    @Test func expiryMustBeADate() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["expd": .string("tomorrow")])) }
    }
}

/// The store as a split read reaches it, moving the clock on before every hold but the first.
final class ClockAdvancingLookup: StoreLookup {
    let fixture: TemporaryStore
    let step: Double
    private(set) var holds = 0

    init(_ fixture: TemporaryStore, by step: Double) {
        self.fixture = fixture
        self.step = step
    }

    func lookup<T: Sendable>(_ body: (ItemStore) throws(KeychainError) -> T) throws(KeychainError) -> T {
        if holds > 0 { fixture.clock.now += step }
        holds += 1
        return try body(fixture.store)
    }
}
