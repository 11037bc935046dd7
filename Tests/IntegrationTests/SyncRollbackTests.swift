import Foundation
import KeychainClient
import KeychainModel
import Testing

/// A sync database restored from a backup (docs/sync.md, 6), end to end: two daemons in one
/// circle, the operator's snapshot of the sync tables put back after both wrote more. Each
/// daemon finds the store behind what it saw, pushes back what the store lost, and the two
/// end with the same items, every write made after the backup included, deletes too.
@Suite("Sync rollback: a restored database is found and healed by the daemons")
struct SyncRollbackTests {
    static func get(_ d: RunningDaemon, _ service: String) throws -> String? {
        let r = try d.cli(["get", "--synchronizable", "--service", service, "--account", "x"])
        return r.status == Exit.success ? r.text : nil
    }

    /// The sync tables copied aside in the same database, as a backup holds them.
    static func snapshot(_ cluster: TestCluster) throws {
        try cluster.sql("""
            CREATE TABLE backup_records AS SELECT * FROM sync_records;
            CREATE TABLE backup_heads AS SELECT * FROM sync_heads;
            CREATE TABLE backup_circles AS SELECT * FROM sync_circles;
            """)
    }

    /// The backup put back, in one transaction, with no notification (a restore sends none).
    static func restore(_ cluster: TestCluster) throws {
        try cluster.sql("""
            BEGIN;
            DELETE FROM sync_records; INSERT INTO sync_records SELECT * FROM backup_records;
            DELETE FROM sync_heads; INSERT INTO sync_heads SELECT * FROM backup_heads;
            UPDATE sync_circles c SET seq = b.seq, epoch = b.epoch FROM backup_circles b WHERE c.circle_id = b.circle_id;
            COMMIT;
            """)
    }

    /// Every synced item of `d`: its attributes (in a canonical form) and its secret.
    static func items(_ d: RunningDaemon) throws -> [String] {
        let r = try d.cli(["list", "--synchronizable", "--json"])
        guard r.status == Exit.success else { return [] }
        let rows = try JSONSerialization.jsonObject(with: Data(r.stdout)) as? [[String: Any]] ?? []
        return try rows.map { row in
            let attributes = String(decoding: try JSONSerialization.data(withJSONObject: row, options: [.sortedKeys]), as: UTF8.self)
            return attributes + " secret=" + (try get(d, row["svce"] as? String ?? "") ?? "(none)")
        }.sorted()
    }

    @Test func aRestoredDatabaseIsHealedAndBothDaemonsKeepEveryWriteMadeAfterTheBackup() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncItemsTests.circle(cluster)
        try SyncAttackTests.add(a, "kept", "k1")
        try SyncAttackTests.add(a, "updated", "before-backup")
        try SyncAttackTests.add(b, "deleted", "d1")
        for d in [a, b, a] { try SyncItemsTests.syncNow(d) }
        try Self.snapshot(cluster)

        try SyncAttackTests.add(a, "a-after", "a2")
        try SyncAttackTests.add(b, "b-after", "b2")
        #expect(try a.cli(["update", "--synchronizable", "--service", "updated", "--account", "x"], input: bytes("after-backup")).status == Exit.success)
        #expect(try a.cli(["delete", "--synchronizable", "--service", "deleted", "--account", "x"]).status == Exit.success)
        for d in [a, b, a] { try SyncItemsTests.syncNow(d) }
        #expect(try Self.get(b, "a-after") == "a2" && Self.get(a, "b-after") == "b2")
        #expect(try Self.get(b, "deleted") == nil)
        let before = try Self.items(a)
        #expect(before == (try Self.items(b)))

        try Self.restore(cluster)
        for d in [a, b, a] { try SyncItemsTests.syncNow(d) }

        for d in [a, b] {
            let status = try KeychainConnection(socketPath: d.socketPath).syncStatus()
            #expect(status.rollbacksHealed == 1, "\(status)")
            #expect(status.lastRollback != nil)
            #expect(status.loop == "ok" && status.lastError == nil, "\(status)")
        }
        // Every write made after the backup is back, on both, and the restored older version
        // of the updated item undid nothing.
        for d in [a, b] {
            #expect(try Self.get(d, "a-after") == "a2")
            #expect(try Self.get(d, "b-after") == "b2")
            #expect(try Self.get(d, "updated") == "after-backup")
            #expect(try Self.get(d, "kept") == "k1")
        }
        // And the store holds them again, for a device that joins later: the four items'
        // records, and the delete that the restored row of the deleted item would have
        // undone, pushed again by the devices that keep it (docs/sync.md 5, "Local tombstones").
        #expect(try cluster.sql("SELECT count(*) FROM sync_records WHERE NOT tombstone").trimmingCharacters(in: .whitespacesAndNewlines) == "4")
        let healedA = try Self.items(a)
        #expect(healedA == (try Self.items(b)))
        #expect(try Self.get(a, "deleted") == nil && Self.get(b, "deleted") == nil)
        #expect(healedA == before)

        // Healed, the circle syncs on by notification alone.
        try SyncAttackTests.add(a, "after-heal", "h1")
        #expect(try SyncItemsTests.waitForGet(b, ["--synchronizable", "--service", "after-heal", "--account", "x"], "h1", within: 2) != nil)
    }
}
