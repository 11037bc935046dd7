import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainStore
import KeychainSync
import Testing

/// A test device's store for the engine, which runs on the loop's thread in the daemon; here
/// every call comes from the test's one thread.
struct SingleThreadStore: SyncLocalStore, @unchecked Sendable {
    let store: ItemStore

    func withReplica<T: Sendable>(_ body: (ItemReplica) throws(KeychainError) -> T) throws(KeychainError) -> T { try body(store.replica) }
}

@Suite("Sync pass: refresh, push, pull against PostgreSQL")
struct SyncEngineTests {
    static let scope = AccessScope(groups: ["com.example.app"])

    /// A founds, B joins and is approved; both refreshed.
    static func pair(_ cluster: TestCluster) throws -> (a: TestDevice, b: TestDevice) {
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        try a.approve(try b.join(try a.create().circle))
        #expect(try b.refresh() == .becameMember)
        return (a, b)
    }

    static func add(_ d: TestDevice, _ service: String, _ secret: String) throws {
        _ = try d.store.items.add(["class": .string("genp"), "svce": .string(service), "acct": .string("x"), "sync": .int(1),
                             "pdmn": .string("ck"), "v_Data": .data(Array(secret.utf8))], scope: scope)
    }

    @Test func aPassPushesTheOutboxWithAHeadOverItsLastCounterAndEmptiesIt() throws {
        let cluster = try TestCluster()
        let (a, _) = try Self.pair(cluster)
        for n in 1...3 { try Self.add(a, "svc-\(n)", "v\(n)") }
        let engine = SyncEngine(store: SingleThreadStore(store: a.store))
        try engine.pass(a.database)
        #expect(engine.totals.pushed == 3)
        #expect(try OutboxPush(a.store.replica).count() == 0)
        #expect(try a.count("sync_records") == 3)
        let head = try a.database.connection.query("SELECT counter FROM sync_heads").rows.first?.first?.int
        #expect(head == 3)
        // Nothing more to send: the next pass pushes nothing and writes no head.
        try engine.pass(a.database)
        #expect(engine.totals.pushed == 3)
    }

    @Test func aFirstPullReadsEveryRowAndRecordsItsEndThenPullsStartAtTheCursor() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.pair(cluster)
        for n in 1...3 { try Self.add(a, "svc-\(n)", "v\(n)") }
        try SyncEngine(store: SingleThreadStore(store: a.store)).pass(a.database)
        #expect(try LocalCircle(b.store.replica).row()?.lastFullPull == nil)

        let engine = SyncEngine(store: SingleThreadStore(store: b.store))
        try engine.pass(b.database)
        let circle = try #require(try LocalCircle(b.store.replica).row())
        #expect(circle.lastFullPull != nil)
        #expect(circle.cursor == 3)
        #expect(engine.totals.pulled == 3 && engine.totals.applied == 3)

        try Self.add(a, "svc-4", "v4")
        try SyncEngine(store: SingleThreadStore(store: a.store)).pass(a.database)
        try engine.pass(b.database)
        #expect(engine.totals.pulled == 4 && engine.totals.applied == 4)  // only the new row was read
        #expect(try LocalCircle(b.store.replica).row()?.cursor == 4)
    }

    @Test func aPendingDevicesPassOnlyRefreshesAndItsFirstPassAsAMemberSyncs() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let device = try b.join(try a.create().circle)
        try Self.add(a, "svc-1", "v1")
        try SyncEngine(store: SingleThreadStore(store: a.store)).pass(a.database)

        let engine = SyncEngine(store: SingleThreadStore(store: b.store))
        try engine.pass(b.database)
        #expect(try b.status().state == SyncCircleState.pending)
        #expect(engine.totals.pulled == 0)

        try a.approve(device)
        try engine.pass(b.database)
        #expect(try b.status().state == SyncCircleState.member)
        #expect(engine.totals.applied == 1)
    }

    /// A delete whose tombstone never reached B (expired, or not carried into a new epoch by
    /// a rotation) is found by B's next full pull: the record is gone from the store.
    @Test func aFullPullDeletesASyncedItemWhoseRecordTheStoreNoLongerHolds() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.pair(cluster)
        try Self.add(a, "svc-1", "v1")
        try Self.add(a, "svc-2", "v2")
        try SyncEngine(store: SingleThreadStore(store: a.store)).pass(a.database)
        let engine = SyncEngine(store: SingleThreadStore(store: b.store))
        try engine.pass(b.database)
        #expect(try OutboxPush(b.store.replica).count() == 0)
        #expect(try b.syncedItems() == 2)

        // One record leaves the store without a tombstone; B's cursor is not trusted any more.
        _ = try a.database.connection.query("DELETE FROM sync_records WHERE seq = 1")
        try b.store.database.run("UPDATE sync_circle SET cursor = 0, last_full_pull = NULL")
        try engine.pass(b.database)
        #expect(try b.syncedItems() == 1)
        #expect(try OutboxPush(b.store.replica).count() == 0)  // nothing to push back: the circle lost it
    }
}

extension TestDevice {
    func syncedItems() throws -> Int {
        try store.database.query("SELECT count(*) FROM items WHERE sync = 1") { (s) throws(KeychainError) -> Int in
            _ = try s.step()
            return Int(s.int(0))
        }
    }
}
