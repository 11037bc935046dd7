import KeychainModel
import KeychainSync
import Testing

extension SyncRollbackEngineTests {
    /// The operator drops the roster's last entry once. The heal puts it back (it is signed,
    /// and this device verified it), so the next passes find the store consistent: without
    /// that, every pass found the roster short again and healed again, a full scan and a full
    /// pull each time for one change of the operator.
    @Test func aRosterShortenedInTheStoreIsHealedOnceWithItsEntriesPutBack() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncEngineTests.pair(cluster)
        let engine = Self.engine(b)
        try SyncEngineTests.add(a, "svc-1", "v1")
        try Self.engine(a).pass(a.database)
        try engine.pass(b.database)
        #expect(try a.count("sync_roster") == 2)

        _ = try a.database.connection.query("DELETE FROM sync_roster WHERE entry_no = 1")
        try engine.pass(b.database)
        #expect(engine.totals.lastRollback?.contains("the roster has 1 entries") == true, "\(engine.totals.lastRollback ?? "")")
        #expect(engine.totals.rollbacksHealed == 1)
        #expect(try a.count("sync_roster") == 2)

        try engine.pass(b.database)
        try engine.pass(b.database)
        #expect(engine.totals.rollbacksHealed == 1)
        #expect(engine.totals.store == .consistent)
        // A, which verified the same roster, finds nothing amiss either.
        let engineA = Self.engine(a)
        try engineA.pass(a.database)
        #expect(engineA.totals.store == .consistent && engineA.totals.rollbacksHealed == 0)
        #expect(try b.syncedItems() == 1)
    }
}
