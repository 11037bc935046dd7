import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Issue 24 through the daemons (docs/sync.md 5): the database operator writes an item's first
/// version, and a deleted item's live row, back under new seqs. The members refuse them and
/// push their newer versions again, so a device approved afterwards ends with the update and
/// without the deleted secret.
@Suite("Sync convergence through the daemons: old rows written back by the operator")
struct SyncConvergenceDaemonTests {
    @Test func aDeviceApprovedAfterOldRowsWereWrittenBackEndsWithTheUpdateAndWithoutTheDeletedItem() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncItemsTests.circle(cluster)
        try SyncAttackTests.add(a, "updated", "old secret")
        try SyncAttackTests.add(a, "deleted", "revoked secret")
        for d in [a, b] { try SyncItemsTests.syncNow(d) }
        try cluster.sql("CREATE TABLE captured AS SELECT * FROM sync_records")
        #expect(try a.cli(["update", "--synchronizable", "--service", "updated", "--account", "x"], input: bytes("new secret")).status == Exit.success)
        #expect(try a.cli(["delete", "--synchronizable", "--service", "deleted", "--account", "x"]).status == Exit.success)
        for d in [a, b] { try SyncItemsTests.syncNow(d) }
        #expect(try SyncAttackTests.get(b, "updated").text == "new secret")

        try cluster.sql("""
            WITH old AS (SELECT record_id, mdat, writer, counter, tombstone, body, row_number() OVER (ORDER BY seq) AS n FROM captured),
                 next AS (UPDATE sync_circles SET seq = seq + 2 RETURNING seq)
            UPDATE sync_records r SET seq = (SELECT seq FROM next) - 2 + old.n, mdat = old.mdat, writer = old.writer,
              counter = old.counter, tombstone = old.tombstone, body = old.body
            FROM old WHERE r.record_id = old.record_id;
            """)
        try SyncItemsTests.syncNow(b)
        try SyncItemsTests.syncNow(a)

        let c = try SyncCircleTests.daemon(cluster)
        let circle = try #require(try KeychainConnection(socketPath: a.socketPath).syncStatus().circleFingerprint)
        let device = try KeychainConnection(socketPath: c.socketPath).syncJoin(circle: circle, name: "c").device
        _ = try KeychainConnection(socketPath: a.socketPath).syncApprove(device: device)
        try SyncItemsTests.syncNow(c)
        for d in [a, b, c] {
            #expect(try SyncAttackTests.get(d, "updated").text == "new secret")
            #expect(try SyncAttackTests.get(d, "deleted").status == Exit.notFound)
        }
    }
}
