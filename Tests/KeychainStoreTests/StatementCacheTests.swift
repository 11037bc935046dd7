import KeychainModel
import Testing
@testable import KeychainStorage
@testable import KeychainStore
import StoreTestSupport

/// Prepared statements are cached under a key computed from a filter's shape. One key for
/// two SQL texts would make one caller's query poison every later caller's.
@Suite("The statement cache")
struct StatementCacheTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return state ^ (state >> 29)
        }
    }

    func randomFilter(_ rng: inout Generator) -> RowFilter {
        let cls = ItemClass.stored.randomElement(using: &rng)!
        let codes = ClassSchema.of(cls)!.columnAttributes.map(\.code)
        let groups = (0..<Int.random(in: 1...3, using: &rng)).map { "g\($0)" }
        var filter = RowFilter(itemClass: cls, accessGroups: groups)
        if Bool.random(using: &rng) { filter.protection = Protection.allCases.randomElement(using: &rng) }
        if Bool.random(using: &rng) { filter.sync = 0 }
        if Int.random(in: 0..<4, using: &rng) == 0 { filter.persistentID = [1, 2, 3] }
        for _ in 0..<Int.random(in: 0...4, using: &rng) {
            filter.hashes.append((codes.randomElement(using: &rng)!, [0xAB]))
        }
        if Bool.random(using: &rng) { filter.limit = [1, 2, 5, 1000].randomElement(using: &rng) }
        if Int.random(in: 0..<4, using: &rng) == 0 { filter.afterRowID = Int64.random(in: 0...9, using: &rng) }
        return filter
    }

    @Test func noTwoDifferentSQLTextsShareACacheKey() {
        var rng = Generator(state: 42)
        var seen: [UInt64: String] = [:]
        var keyed = 0
        for _ in 0..<20_000 {
            let filter = randomFilter(&rng)
            let clause = ItemTable.selection(filter).clause
            let sql = "\(filter.itemClass.rawValue)|" + clause.conditions()
            guard let shape = clause.shape else { continue }
            keyed += 1
            if let earlier = seen[shape] {
                #expect(earlier == sql, "shape \(shape) keys both \(earlier) and \(sql)")
            } else {
                seen[shape] = sql
            }
        }
        #expect(keyed > 10_000)  // most filters are still cached
    }

    @Test func aColumnNamedTwiceIsNotKeyedLikeTheColumnNamedOnce() {
        var once = RowFilter(itemClass: .key, accessGroups: ["g"])
        once.hashes = [("klbl", [1])]
        var twice = once
        twice.hashes.append(("klbl", [2]))
        let a = ItemTable.selection(once).clause
        let b = ItemTable.selection(twice).clause
        #expect(a.conditions() != b.conditions())
        #expect(a.shape == nil || a.shape != b.shape)
    }

    @Test func aMatchLimitIsBoundSoEveryLimitSharesOneStatement() {
        var seven = RowFilter(itemClass: .genericPassword, accessGroups: ["g"])
        seven.limit = 7
        var million = seven
        million.limit = 1_000_000
        let a = ItemTable.selection(seven).clause
        let b = ItemTable.selection(million).clause
        #expect(a.conditions() == b.conditions())
        #expect(a.shape != nil && a.shape == b.shape)
        #expect(a.values.last == .int(7) && b.values.last == .int(1_000_000))
    }

    @Test func aFilterWithALimitIsKeyedApartFromOneWithout() {
        let all = RowFilter(itemClass: .genericPassword, accessGroups: ["g"])
        var one = all
        one.limit = 1
        #expect(ItemTable.selection(all).clause.shape != ItemTable.selection(one).clause.shape)
    }

    @Test func aStatementSharedByTwoLimitsReturnsEachItsOwnNumberOfRows() throws {
        let t = try TemporaryStore()
        for account in ["a", "b", "c", "d"] {
            try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .string(account), "v_Data": .data([1])])
        }
        func rows(limit: Int64) throws -> Int {
            let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("s"), "m_Limit": .int(limit)]
            let prepared = t.store.splitReader.prepare(try ItemQuery(query, for: .copyMatching), groups: TemporaryStore.app.groups)
            return try t.store.rows.all(prepared.selection).rows.count
        }
        #expect(try rows(limit: 3) == 3)
        #expect(try rows(limit: 1) == 1)
        #expect(try rows(limit: 1_000_000) == 4)
    }

    /// The reported exhaustion: each m_Limit value was a statement of its own, cached forever
    /// (100,000 queries took the daemon from 29 MB to 999 MB).
    @Test func distinctMatchLimitsLeaveTheCacheWithinItsCapacity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .string("a"), "v_Data": .data([1])])
        for limit in 1...5_000 {
            let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("s"), "m_Limit": .int(Int64(limit)),
                                              "r_Data": .bool(true)]
            let prepared = t.store.splitReader.prepare(try ItemQuery(query, for: .copyMatching), groups: TemporaryStore.app.groups)
            _ = try t.store.splitReader.finish(prepared, try t.store.rows.all(prepared.selection), wanted: Int(limit))
        }
        let counts = t.store.database.cachedStatementCounts
        #expect(counts.texts <= SQLiteDatabase.statementCacheCapacity)
        #expect(counts.shapes <= SQLiteDatabase.statementCacheCapacity)
    }

    /// Attributes are bound too, but which ones a query names shapes its SQL: a key query can
    /// name any of 2^10 sets of hashed columns.
    @Test func distinctAttributeCombinationsLeaveTheCacheWithinItsCapacity() throws {
        let t = try TemporaryStore()
        let specs = ClassSchema.key.columnAttributes
        for subset in 0..<(1 << specs.count) {
            var query: AttributeDictionary = ["class": .string("keys")]
            for (i, spec) in specs.enumerated() where subset & (1 << i) != 0 { query[spec.code] = spec.defaultValue }
            let error = #expect(throws: KeychainError.self) { try t.copy(query) }
            #expect(error?.status == .itemNotFound)
        }
        let counts = t.store.database.cachedStatementCounts
        #expect(counts.texts <= SQLiteDatabase.statementCacheCapacity)
        #expect(counts.shapes <= SQLiteDatabase.statementCacheCapacity)
        #expect(t.store.database.preparedStatementCount <= 2 * SQLiteDatabase.statementCacheCapacity)
    }

    /// The reported attack: one app's identity query naming klbl made every later identity
    /// lookup (any app's) find nothing until the daemon restarted.
    @Test func anIdentityQueryNamingTheKeyLabelDoesNotBreakOtherIdentityLookups() throws {
        let t = try TemporaryStore()
        let keyID = TestCertificate.p256KeyID
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER), "labl": .string("mine")])
        try t.add(["class": .string("keys"), "v_Data": .data(Array("KEY".utf8)), "klbl": .data(keyID), "kcls": .int(1), "priv": .int(1)])
        let other = AccessScope(groups: ["com.example.other", "com.example.other-shared"])  // as many groups as the app: the same shape
        // The other app's own certificate makes its query reach the key lookup.
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.ed25519DER)], scope: other)
        _ = try? t.store.items.copyMatching(["class": .string("idnt"), "klbl": .data(TestCertificate.ed25519KeyID)], scope: other)
        let result = try t.copy(["class": .string("idnt"), "labl": .string("mine"), "r_Data": .bool(true)])
        #expect(result == .single(.data(Array("KEY".utf8))))
        try t.store.items.update(["class": .string("idnt"), "labl": .string("mine")], changes: ["v_Data": .data(Array("NEW".utf8))],
                           scope: TemporaryStore.app)
        try t.store.items.delete(["class": .string("idnt")], scope: TemporaryStore.app)
        #expect(try t.store.itemCount() == 1)  // the other app's certificate
    }
}
