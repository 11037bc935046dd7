import Testing
@testable import KeychainStorage

@Suite("A least-recently-used cache")
struct LRUCacheTests {
    @Test func neverHoldsMoreThanItsCapacity() {
        var cache = LRUCache<Int, Int>(capacity: 8)
        for i in 0..<1_000 {
            cache.insert(i, for: i)
            #expect(cache.count <= 8)
        }
        #expect(cache.count == 8)
    }

    @Test func dropsTheLeastRecentlyUsedValueToMakeRoom() {
        var cache = LRUCache<Int, String>(capacity: 3)
        cache.insert("a", for: 1)
        cache.insert("b", for: 2)
        cache.insert("c", for: 3)
        _ = cache.value(for: 1)  // now 2 is the oldest
        cache.insert("d", for: 4)
        #expect(cache.value(for: 2) == nil)
        #expect(cache.value(for: 1) == "a")
        #expect(cache.value(for: 3) == "c")
        #expect(cache.value(for: 4) == "d")
    }

    @Test func aValueUsedAgainAndAgainOutlivesEveryOther() {
        var cache = LRUCache<Int, Int>(capacity: 4)
        cache.insert(-1, for: -1)
        for i in 0..<100 {
            cache.insert(i, for: i)
            #expect(cache.value(for: -1) == -1)
        }
    }

    @Test func replacingACachedKeyDropsNothingElse() {
        var cache = LRUCache<Int, String>(capacity: 2)
        cache.insert("a", for: 1)
        cache.insert("b", for: 2)
        cache.insert("B", for: 2)
        #expect(cache.value(for: 1) == "a")
        #expect(cache.value(for: 2) == "B")
        #expect(cache.count == 2)
    }
}
