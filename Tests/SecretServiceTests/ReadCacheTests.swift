import DBus
@testable import SecretService
import Testing

/// The bridge's read cache (Sources/SecretService/ReadCache.swift): what it answers again and
/// when it must ask keychaind instead.
@Suite("Secret Service read cache")
struct ReadCacheTests {
    let key = ReadCache.Key.itemProperties(path: "/org/freedesktop/secrets/collection/login/1")
    let first = ExecutableStamp(device: 1, inode: 10)
    let label: ReadCache.Value = .properties(["Label": .string("mine")])

    func label(_ value: ReadCache.Value?) -> String? {
        guard case .properties(let values)? = value, case .string(let text)? = values["Label"] else { return nil }
        return text
    }

    @Test func anEntryIsAnsweredWhileTheSameExecutableRunsWithinMaxAge() {
        var cache = ReadCache()
        cache.store(label, key, of: ":1.5", executable: first, now: 100)
        #expect(label(cache.value(key, of: ":1.5", executable: first, now: 104.9)) == "mine")
        #expect(cache.value(key, of: ":1.5", executable: first, now: 105) == nil)
    }

    @Test func anotherExecutableOnTheConnectionDropsItsEntries() {
        var cache = ReadCache()
        cache.store(label, key, of: ":1.5", executable: first, now: 100)
        cache.store(.collectionRecords(CollectionRecordSet()), .collectionRecords, of: ":1.5", executable: first, now: 100)
        #expect(cache.value(key, of: ":1.5", executable: ExecutableStamp(device: 1, inode: 11), now: 100) == nil)
        // Dropped, not hidden: the first executable's stamp no longer finds them either.
        #expect(cache.value(key, of: ":1.5", executable: first, now: 100) == nil)
        #expect(cache.value(.collectionRecords, of: ":1.5", executable: first, now: 100) == nil)
        #expect(cache.isEmpty)
    }

    @Test func anUnreadableExecutableDropsTheEntriesAndStoresNothing() {
        var cache = ReadCache()
        cache.store(label, key, of: ":1.5", executable: first, now: 100)
        #expect(cache.value(key, of: ":1.5", executable: nil, now: 100) == nil)
        #expect(cache.isEmpty)
        cache.store(label, key, of: ":1.5", executable: nil, now: 100)
        #expect(cache.isEmpty)
    }

    @Test func aStoreUnderAnotherExecutableReplacesTheConnectionsEntries() {
        var cache = ReadCache()
        let second = ExecutableStamp(device: 2, inode: 10)
        cache.store(.collectionRecords(CollectionRecordSet()), .collectionRecords, of: ":1.5", executable: first, now: 100)
        cache.store(label, key, of: ":1.5", executable: second, now: 100)
        #expect(cache.value(.collectionRecords, of: ":1.5", executable: second, now: 100) == nil)
        #expect(label(cache.value(key, of: ":1.5", executable: second, now: 100)) == "mine")
    }

    @Test func anotherConnectionsExecutableLeavesThisOnesEntries() {
        var cache = ReadCache()
        cache.store(label, key, of: ":1.5", executable: first, now: 100)
        cache.store(label, key, of: ":1.6", executable: first, now: 100)
        #expect(cache.value(key, of: ":1.6", executable: ExecutableStamp(device: 9, inode: 9), now: 100) == nil)
        #expect(label(cache.value(key, of: ":1.5", executable: first, now: 100)) == "mine")
    }
}
