import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainStore
import KeychainSync
import Testing
import StoreTestSupport

/// The store's record, head and circle tables as they are now, kept aside in the same
/// database, and put back later: what restoring a backup of the sync database does.
struct StoreSnapshot {
    let database: SyncDatabase

    init(_ database: SyncDatabase) throws {
        self.database = database
        for table in ["sync_records", "sync_heads", "sync_circles", "sync_roster"] {
            _ = try database.connection.query("CREATE TABLE snapshot_\(table) AS SELECT * FROM \(table)")
        }
    }

    func restore() throws {
        _ = try database.connection.query("DELETE FROM sync_records")
        _ = try database.connection.query("INSERT INTO sync_records SELECT * FROM snapshot_sync_records")
        _ = try database.connection.query("DELETE FROM sync_heads")
        _ = try database.connection.query("INSERT INTO sync_heads SELECT * FROM snapshot_sync_heads")
        _ = try database.connection.query("UPDATE sync_circles c SET seq = s.seq, epoch = s.epoch FROM snapshot_sync_circles s WHERE c.circle_id = s.circle_id")
    }
}

@Suite("Sync rollback: signed heads checked each pass, a rolled-back store healed")
struct SyncRollbackEngineTests {
    static func engine(_ d: TestDevice) -> SyncEngine<SingleThreadStore> { SyncEngine(store: SingleThreadStore(store: d.store)) }

    static func id(_ d: TestDevice) throws -> SyncDeviceID { try #require(try LocalCircle(d.store.replica).identity()).id }

    static func remembered(_ d: TestDevice) throws -> [SyncDeviceID: SyncHeadPosition] {
        try SyncHeadsSeenTable(d.store.database).heads()
    }

    @Test func aConsistentPassRemembersEveryWritersVerifiedHead() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        for n in 1...2 { try SyncEngineTests.add(a, "svc-\(n)", "v\(n)") }
        try Self.engine(a).pass(a.database)
        let engine = Self.engine(b)
        try engine.pass(b.database)
        #expect(engine.totals.store == .consistent)
        #expect(try Self.remembered(b)[try Self.id(a)] == SyncHeadPosition(counter: 2, rosterLength: 2))
    }

    @Test func aStoreBehindTheCursorIsRolledBackAndTheHealPushesBackWhatItLostWithItsVersion() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "svc-1", "v1")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        let snapshot = try StoreSnapshot(a.database)
        try SyncEngineTests.add(a, "svc-2", "v2")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        let lost = try a.database.connection.query("SELECT record_id, mdat, writer, counter FROM sync_records WHERE seq = 2").rows
        try #require(lost.count == 1)

        try snapshot.restore()
        #expect(try a.count("sync_records") == 1)
        try engineB.pass(b.database)
        #expect(engineB.totals.lastRollback?.contains("below this device's cursor") == true)
        #expect(engineB.totals.rollbacksHealed == 1)
        #expect(engineB.totals.store == .consistent)
        // B held A's second item: it is back in the store under A's own version.
        let healed = try a.database.connection.query("SELECT record_id, mdat, writer, counter FROM sync_records WHERE record_id = $1",
                                                     [.bytea(try #require(lost[0][0].bytes))]).rows
        #expect(healed == lost)
        #expect(try b.syncedItems() == 2)
        #expect(try LocalCircle(b.store.replica).row()?.rollback == nil)
        // The next pass finds the store consistent and heals nothing more.
        try engineB.pass(b.database)
        #expect(engineB.totals.rollbacksHealed == 1)
    }

    @Test func aHeadBelowTheOneRememberedIsARollbackEvenWithTheSeqPastTheCursor() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(b, "svc-1", "v1")
        try engineB.pass(b.database)
        let snapshot = try StoreSnapshot(a.database)
        try SyncEngineTests.add(b, "svc-2", "v2")
        try engineB.pass(b.database)
        try snapshot.restore()
        // Others' writes since the restore take the seq past B's cursor again.
        for n in 1...3 { try SyncEngineTests.add(a, "a-\(n)", "v\(n)") }
        try engineA.pass(a.database)

        try engineB.pass(b.database)
        #expect(engineB.totals.lastRollback?.contains("the head of device \(try Self.id(b))") == true)
        #expect(engineB.totals.rollbacksHealed == 1)
        try engineA.pass(a.database)
        #expect(try a.syncedItems() == 5)
    }

    @Test func aForgedHeadIsCountedAndNeverRemembered() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        try SyncEngineTests.add(a, "svc-1", "v1")
        try Self.engine(a).pass(a.database)
        let engine = Self.engine(b)
        try engine.pass(b.database)
        let aID = try Self.id(a)
        #expect(try Self.remembered(b)[aID]?.counter == 1)

        // The operator raises A's head: its signature no longer covers it.
        _ = try a.database.connection.query("UPDATE sync_heads SET counter = 99 WHERE device_id = $1", [.bytea(aID.bytes)])
        try engine.pass(b.database)
        #expect(engine.totals.headsRejected == 1)
        // A's real head is gone from what verifies: a rollback, never a head at 99.
        #expect(engine.totals.lastRollback?.contains("the head of device \(aID) is gone") == true)
        #expect(try Self.remembered(b)[aID]?.counter != 99)
    }

    @Test func aHeadNamingALongerRosterThanTheStoreShowsIsAPartitionNotAHeal() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let c = try TestDevice(cluster)
        try a.approve(try c.join(try #require(try a.status().circleFingerprint), name: "third"))
        try SyncEngineTests.add(a, "svc-1", "v1")
        try Self.engine(a).pass(a.database)  // A's head names the roster of 3 entries
        // The store withholds the third entry from B.
        _ = try a.database.connection.query("DELETE FROM sync_roster WHERE entry_no = 2")
        let engine = Self.engine(b)
        try engine.pass(b.database)
        #expect(engine.totals.store == .partitioned)
        #expect(engine.totals.rollbacksHealed == 0)
        #expect(try LocalCircle(b.store.replica).row()?.rollback == nil)
    }

    /// A full pull without the re-push of a locked class's items would delete them as gone
    /// from the store: the heal waits for the unlock, and the rollback stays recorded.
    @Test func aHealWaitsWhileAClassHoldingSyncedItemsIsLockedThenEndsAfterTheUnlock() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        try b.store.setPasscode([1, 2, 3])
        let engineA = Self.engine(a), engineB = Self.engine(b)
        try SyncEngineTests.add(a, "svc-1", "v1")
        try engineA.pass(a.database)
        try engineB.pass(b.database)
        let snapshot = try StoreSnapshot(a.database)
        _ = try b.store.items.add(["class": .string("genp"), "svce": .string("b-ak"), "acct": .string("x"), "sync": .int(1),
                             "pdmn": .string("ak"), "v_Data": .data(Array("secret".utf8))], scope: SyncEngineTests.scope)
        try engineB.pass(b.database)
        try snapshot.restore()
        b.store.lock()

        #expect(throws: KeychainError.self) { try engineB.pass(b.database) }
        guard case .rolledBack = engineB.totals.store else {
            Issue.record("the store is \(engineB.totals.store), not rolledBack, while the heal waits")
            return
        }
        #expect(try LocalCircle(b.store.replica).row()?.rollback != nil)
        #expect(try b.count("sync_records") == 1)  // nothing pushed, nothing pulled
        #expect(try b.syncedItems() == 2)

        try b.store.unlock(passcode: [1, 2, 3])
        try engineB.pass(b.database)
        #expect(engineB.totals.rollbacksHealed == 1)
        #expect(engineB.totals.store == .consistent)
        #expect(try LocalCircle(b.store.replica).row()?.rollback == nil)
        #expect(try b.count("sync_records") == 2)
        #expect(try b.syncedItems() == 2)
    }
}
