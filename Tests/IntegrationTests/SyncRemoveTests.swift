import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Remove and leave end to end (docs/sync.md, 3): two real daemons on one throw-away cluster,
/// through the CLI.
@Suite("Sync remove and leave through two daemons")
struct SyncRemoveTests {
    /// A founded by a, b approved: both members at epoch 1. Returns b's fingerprint.
    static func circle(_ a: RunningDaemon, _ b: RunningDaemon) throws -> String {
        let ca = KeychainConnection(socketPath: a.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        let bPrint = try cb.syncJoin(circle: try ca.syncCreate(name: "a").circle, name: "b").device
        _ = try ca.syncApprove(device: bPrint)
        #expect(try cb.syncStatus().state == "member")
        return bPrint
    }

    @Test func syncRemoveStartsTheNextEpochAndTheRemovedDaemonSeesItsRemoval() throws {
        let cluster = try TestCluster()
        let a = try SyncCircleTests.daemon(cluster), b = try SyncCircleTests.daemon(cluster)
        let bPrint = try Self.circle(a, b)

        let removed = try a.cli(["sync", "remove", bPrint])
        #expect(removed.status == Exit.success, "\(removed.stderr)")
        #expect(removed.text.contains("epoch: 2"))
        let aStatus = try KeychainConnection(socketPath: a.socketPath).syncStatus()
        #expect(aStatus.epoch == 2 && aStatus.members == 1)
        #expect(try KeychainConnection(socketPath: b.socketPath).syncStatus().state == "removed")
    }

    @Test func removingItselfIsRefusedNamingLeaveAndUnknownDigitsAreNotFound() throws {
        let cluster = try TestCluster()
        let a = try SyncCircleTests.daemon(cluster), b = try SyncCircleTests.daemon(cluster)
        _ = try Self.circle(a, b)
        let own = try KeychainConnection(socketPath: a.socketPath).syncStatus().deviceFingerprint ?? ""
        let itself = try a.cli(["sync", "remove", own])
        #expect(itself.status != Exit.success && itself.stderr.contains("leave"))
        #expect(try a.cli(["sync", "remove", String(repeating: "1", count: 32)]).status == Exit.notFound)
    }

    @Test func afterSyncLeaveTheRemainingMemberRotatesOnItsNextRefresh() throws {
        let cluster = try TestCluster()
        let a = try SyncCircleTests.daemon(cluster), b = try SyncCircleTests.daemon(cluster)
        _ = try Self.circle(a, b)
        let left = try b.cli(["sync", "leave"])
        #expect(left.status == Exit.success, "\(left.stderr)")
        #expect(try KeychainConnection(socketPath: b.socketPath).syncStatus().state == "off")
        // a's status refreshes first, finds the leave and rotates.
        let aStatus = try KeychainConnection(socketPath: a.socketPath).syncStatus()
        #expect(aStatus.epoch == 2 && aStatus.members == 1)
    }
}

/// A device that leaves one circle and joins another must hear the new circle's pushes: its
/// running sync thread moves its LISTEN to the new circle's channel (docs/sync.md 7.2).
@Suite("Sync thread follows the circle it serves")
struct SyncLoopFollowsTheCircleTests {
    let item = ["--service", "follow-svc-Jx4", "--account", "follow-acct-Lm2"]

    @Test func afterLeavingAndJoiningAnotherCircleAnAddThereReachesTheDeviceWithoutSyncNow() throws {
        let cluster = try TestCluster()
        let (_, b) = try SyncItemsTests.circle(cluster)
        try SyncItemsTests.syncNow(b)  // b's thread is connected and listening on the first circle
        let left = try b.cli(["sync", "leave"])
        #expect(left.status == Exit.success, "\(left.stderr)")

        let c = try SyncCircleTests.daemon(cluster)
        let cc = KeychainConnection(socketPath: c.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        let second = try cc.syncCreate(name: "c").circle
        _ = try cc.syncApprove(device: try cb.syncJoin(circle: second, name: "b").device)
        let status = try cb.syncStatus()
        #expect(status.state == "member" && status.circleFingerprint == second)
        for d in [c, b] { try SyncItemsTests.syncNow(d) }

        #expect(try c.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + item, input: bytes("tok")).status == Exit.success)
        let took = try SyncItemsTests.waitForGet(b, item, "tok", within: 5)
        #expect(took != nil, "the add on the second circle did not reach b within 5 s without `sync now`")
    }
}
