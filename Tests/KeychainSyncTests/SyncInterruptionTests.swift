import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainStore
import KeychainSync
import Testing

/// A device's store that stops the database (as if it crashed) the first time `stopWhen`
/// holds after a step of the pass: a deterministic "mid-sync" for the tests below.
private final class HaltingStore: SyncLocalStore, @unchecked Sendable {
    let store: ItemStore
    let cluster: TestCluster
    let stopWhen: (ItemStore) throws -> Bool
    private(set) var halted = false

    init(_ store: ItemStore, _ cluster: TestCluster, stopWhen: @escaping (ItemStore) throws -> Bool) {
        self.store = store
        self.cluster = cluster
        self.stopWhen = stopWhen
    }

    func withReplica<T: Sendable>(_ body: (ItemReplica) throws(KeychainError) -> T) throws(KeychainError) -> T {
        let result = try body(store.replica)
        if !halted, (try? stopWhen(store)) == true {
            halted = true
            try? cluster.halt()
        }
        return result
    }
}

/// docs/sync.md 7.2: the database stopped and restarted in the middle of a push or of a first
/// sync loses nothing and applies nothing twice.
@Suite("Sync pass: the database stopped mid-sync")
struct SyncInterruptionTests {
    static let items = 2_500  // three pull batches, five push transactions

    static func fill(_ d: TestDevice) throws {
        try d.store.database.transaction { () throws(KeychainError) in
            for n in 0..<items {
                _ = try d.store.items.add(["class": .string("genp"), "svce": .string("svc-\(n)"), "acct": .string("x"), "sync": .int(1),
                                     "pdmn": .string("ck"), "v_Data": .data(Array("v\(n)".utf8))], scope: SyncEngineTests.scope)
            }
        }
    }

    @Test func aFirstSyncCutAfterItsFirstBatchEndsWithEveryItemOnce() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        try Self.fill(a)
        try SyncEngine(store: SingleThreadStore(store: a.store)).pass(a.database)
        #expect(try a.count("sync_records") == Int64(Self.items))

        let cutting = HaltingStore(b.store, cluster) { try (LocalCircle($0.replica).row()?.cursor ?? 0) > 0 }
        let engine = SyncEngine(store: cutting)
        #expect(throws: KeychainError.self) { try engine.pass(b.database) }
        #expect(cutting.halted)
        let partial = try b.syncedItems()
        #expect(partial > 0 && partial < Self.items)

        try cluster.resume()
        try engine.pass(SyncDatabase(try PostgresConnection(cluster.url)))
        #expect(try b.syncedItems() == Self.items)
        #expect(try LocalCircle(b.store.replica).row()?.cursor == Int64(Self.items))
        // An unfinished full pull starts again from the first row (its record ids decide what
        // the reconcile deletes): the first pass's batch is read twice, applied once.
        #expect(engine.totals.pulled == 1_000 + Self.items)
        #expect(engine.totals.applied == Self.items)
    }

    @Test func aPushCutAfterItsFirstTransactionEndsWithEveryRecordOnce() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        try Self.fill(a)
        let cutting = HaltingStore(a.store, cluster) { try OutboxPush($0.replica).count() < Self.items }
        let engine = SyncEngine(store: cutting)
        #expect(throws: KeychainError.self) { try engine.pass(a.database) }
        #expect(cutting.halted)
        #expect(try OutboxPush(a.store.replica).count() > 0)

        try cluster.resume()
        let database = SyncDatabase(try PostgresConnection(cluster.url))
        try engine.pass(database)
        #expect(try OutboxPush(a.store.replica).count() == 0)
        let rows = try database.connection.query("SELECT count(*)::int8, count(DISTINCT counter)::int8, max(seq) FROM sync_records").rows
        #expect(rows == [[.int(Int64(Self.items)), .int(Int64(Self.items)), .int(Int64(Self.items))]])

        try SyncEngine(store: SingleThreadStore(store: b.store)).pass(database)  // B's own connection died with the server
        #expect(try b.syncedItems() == Self.items)
    }
}
