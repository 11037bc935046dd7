import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainStore
import KeychainSync
import Testing

/// The database operator serving an older version of a record again, by writing its old row
/// back or by restoring the whole store: devices that held a newer version (an update or a
/// delete) push it again, and a device that joins afterwards converges to it
/// (docs/sync.md, 5, "Older versions served again" and "Local tombstones").
@Suite("Sync convergence: newer versions pushed again, deletes kept")
struct SyncConvergenceTests {
    static let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("deploy"), "acct": .string("x"), "sync": .int(1)]

    static func engine(_ d: TestDevice, clock: (@Sendable () -> Int64)? = nil) -> SyncEngine<SingleThreadStore> {
        guard let clock else { return SyncEngine(store: SingleThreadStore(store: d.store)) }
        return SyncEngine(store: SingleThreadStore(store: d.store), housekeepingInterval: .zero, clock: clock)
    }

    static func secret(_ d: TestDevice) throws -> String? {
        var query = item
        query["r_Data"] = .bool(true)
        // The tests' one synced item: none held is nil, any other failure throws.
        guard try d.syncedItems() > 0 else { return nil }
        guard case .single(.data(let data)) = try d.store.items.copyMatching(query, scope: SyncEngineTests.scope) else { return nil }
        return String(decoding: Array(data), as: UTF8.self)
    }

    static func delete(_ d: TestDevice) throws { try d.store.items.delete(item, scope: SyncEngineTests.scope) }

    /// A third device approved now, after its first pass.
    static func newcomer(_ cluster: TestCluster, approvedBy a: TestDevice) throws -> TestDevice {
        let c = try TestDevice(cluster)
        try a.approve(try c.join(try #require(try a.status().circleFingerprint), name: "third"))
        try engine(c).pass(c.database)
        return c
    }

    /// The store's one row, every column the operator would keep to write it back later.
    static func capture(_ d: TestDevice) throws -> [PostgresValue] {
        let rows = try d.database.connection.query("SELECT record_id, mdat, writer, counter, tombstone, body FROM sync_records").rows
        try #require(rows.count == 1)
        return rows[0]
    }

    /// What the operator does: the captured row back in place of the record's current one,
    /// under a new seq so that every device pulls it.
    static func writeBack(_ row: [PostgresValue], on d: TestDevice) throws {
        _ = try d.database.connection.query("UPDATE sync_circles SET seq = seq + 1")
        _ = try d.database.connection.query("""
            UPDATE sync_records SET seq = (SELECT seq FROM sync_circles), mdat = $2, writer = $3, counter = $4, tombstone = $5, body = $6
            WHERE record_id = $1
            """, row)
    }

    static func liveRows(_ d: TestDevice) throws -> Int64 {
        try d.database.connection.query("SELECT count(*)::int8 FROM sync_records WHERE NOT tombstone").rows.first?.first?.int ?? -1
    }

    @Test func anOlderRowWrittenBackIsAnsweredWithTheNewerVersionAndANewDeviceEndsWithIt() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "deploy", "old secret")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        let old = try Self.capture(a)
        try a.store.items.update(Self.item, changes: ["v_Data": .data(Array("new secret".utf8))], scope: SyncEngineTests.scope)
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        #expect(try Self.secret(b) == "new secret")

        try Self.writeBack(old, on: a)
        try engineB.pass(b.database)
        // B refuses the old row (a replay of A's first counter) and answers it in the same pass.
        #expect(engineB.totals.repushed == 1)
        #expect(try Self.secret(b) == "new secret")
        let c = try Self.newcomer(cluster, approvedBy: a)
        #expect(try Self.secret(c) == "new secret")
        try engineA.pass(a.database)
        #expect(try Self.secret(a) == "new secret")
    }

    /// Nothing is pushed again in an ordinary exchange: every row pulled is the newest
    /// version of its record, or this device's own.
    @Test func anOrdinaryExchangePushesNothingAgain() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "deploy", "first")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        try b.store.items.update(Self.item, changes: ["v_Data": .data(Array("second".utf8))], scope: SyncEngineTests.scope)
        try engineB.pass(b.database)
        #expect(engineB.totals.repushed == 0)
        try engineA.pass(a.database)
        #expect(engineA.totals.repushed == 0)
        #expect(try Self.secret(a) == "second")
    }

    @Test func aDeleteIsNeverUndoneByAStoreRestoredFromBeforeItAndANewDeviceConvergesToIt() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "deploy", "revoked secret")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        let snapshot = try StoreSnapshot(a.database)
        try Self.delete(a)
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        #expect(try Self.secret(b) == nil)
        #expect(try LocalTombstones(a.store.replica).count() == 1)
        #expect(try LocalTombstones(b.store.replica).count() == 1)

        try snapshot.restore()
        #expect(try Self.liveRows(a) == 1)
        for _ in 1...2 {
            try engineA.pass(a.database)
            try engineB.pass(b.database)
        }
        #expect(try Self.secret(a) == nil)
        #expect(try Self.secret(b) == nil)
        #expect(engineA.totals.rollbacksHealed == 1)
        #expect(try Self.liveRows(a) == 0)  // the delete went back to the store
        let c = try Self.newcomer(cluster, approvedBy: a)
        #expect(try Self.secret(c) == nil)
        // C never held the item: it keeps no trace of its delete.
        #expect(try LocalTombstones(c.store.replica).count() == 0)
    }

    @Test func aDeletedItemsOldRowWrittenBackIsNotAppliedAndTheDeleteGoesBack() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "deploy", "revoked secret")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        let old = try Self.capture(a)
        try Self.delete(b)
        try engineB.pass(b.database)
        try engineA.pass(a.database)
        #expect(try Self.secret(a) == nil)

        try Self.writeBack(old, on: a)
        #expect(try Self.liveRows(a) == 1)
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        #expect(try Self.secret(a) == nil)
        #expect(try Self.secret(b) == nil)
        #expect(engineA.totals.repushed == 1)
        #expect(try Self.liveRows(a) == 0)
        let c = try Self.newcomer(cluster, approvedBy: a)
        #expect(try Self.secret(c) == nil)
    }

    /// A kept delete stops older versions only: the item added again after it, anywhere, is
    /// a newer version and arrives, and the delete is forgotten.
    @Test func anItemAddedAgainAfterItsDeleteArrivesDespiteTheKeptDelete() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "deploy", "first")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        try Self.delete(a)
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        try SyncEngineTests.add(b, "deploy", "again")
        try engineB.pass(b.database)
        try engineA.pass(a.database)
        #expect(try Self.secret(a) == "again")
        #expect(engineA.totals.repushed == 0)
        #expect(try LocalTombstones(a.store.replica).count() == 0)
    }

    /// The file names no record: a kept delete's tag is not the record id the store shows.
    @Test func aKeptDeleteHoldsNoRecordIdOfTheStoreAndNoAttribute() throws {
        let cluster = try TestCluster()
        let (a, _) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a)
        try SyncEngineTests.add(a, "deploy", "secret")
        try engineA.pass(a.database)
        let recordID = try #require(try Self.capture(a)[0].bytes)
        try Self.delete(a)
        try engineA.pass(a.database)
        let kept = try a.store.database.query("SELECT * FROM sync_local_tombstones") { (s) throws(KeychainError) -> [[UInt8]] in
            var columns: [[UInt8]] = []
            while try s.step() {
                for n in 0..<6 { columns.append(s.blob(Int32(n))) }
            }
            return columns
        }
        #expect(!kept.isEmpty)
        #expect(!kept.contains(recordID))
        #expect(!kept.contains { String(decoding: $0, as: UTF8.self).contains("deploy") })
    }

    @Test func aKeptDeleteIsSweptOnceItsWindowHasPassedAndNotBefore() throws {
        let cluster = try TestCluster()
        let (a, _) = try SyncEngineTests.pair(cluster)
        try SyncEngineTests.add(a, "deploy", "secret")
        try Self.engine(a).pass(a.database)
        try Self.delete(a)
        try Self.engine(a).pass(a.database)
        let keptAt = ItemReplica.milliseconds(a.store.replica.now())
        #expect(try LocalTombstones(a.store.replica).count() == 1)

        let minute: Int64 = 60_000
        try Self.engine(a, clock: { keptAt + LocalTombstones.window - minute }).pass(a.database)
        #expect(try LocalTombstones(a.store.replica).count() == 1)
        try Self.engine(a, clock: { keptAt + LocalTombstones.window + minute }).pass(a.database)
        #expect(try LocalTombstones(a.store.replica).count() == 0)
    }

    /// The tags are of the circle's keys: leaving the circle, and the erase that replaces
    /// the class keys, leave no kept delete behind.
    @Test func leavingTheCircleAndTheEraseDropTheKeptDeletes() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        for d in [a, b] {
            try SyncEngineTests.add(d, d === a ? "a" : "b", "secret")
            try Self.engine(d).pass(d.database)
            try d.store.items.delete(["class": .string("genp"), "sync": .int(1)], scope: SyncEngineTests.scope)
            try Self.engine(d).pass(d.database)
            #expect(try LocalTombstones(d.store.replica).count() == 1)
        }
        try LocalCircle(a.store.replica).leave()
        #expect(try LocalTombstones(a.store.replica).count() == 0)
        try b.store.erase()
        #expect(try LocalTombstones(b.store.replica).count() == 0)
    }
}
