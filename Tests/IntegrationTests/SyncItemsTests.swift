import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Synchronizable items end to end (issue 18, docs/sync.md 7.2 and 11): two real daemons in
/// one circle on one throw-away PostgreSQL cluster, their sync threads pushing and pulling.
@Suite("Sync items: an add on one daemon is a get on the other")
struct SyncItemsTests {
    let item = ["--service", "sync-svc-7Qw", "--account", "sync-acct-3Zp"]

    /// A founds a circle, B joins, A approves; B's status makes B see the approval at once.
    static func circle(_ cluster: TestCluster, bConfig: String = "") throws -> (a: RunningDaemon, b: RunningDaemon) {
        let a = try SyncCircleTests.daemon(cluster), b = try SyncCircleTests.daemon(cluster, extra: bConfig)
        let ca = KeychainConnection(socketPath: a.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        let device = try cb.syncJoin(circle: try ca.syncCreate(name: "a").circle, name: "b").device
        _ = try ca.syncApprove(device: device)
        let status = try cb.syncStatus()
        guard status.state == "member" else { throw KeychainError(.internal, "b is \(status.state) after approval") }
        return (a, b)
    }

    /// Polls `get` on `d` until it prints `expected` (or, with nil, finds nothing); the seconds it took.
    static func waitForGet(_ d: RunningDaemon, _ arguments: [String], _ expected: String?, within seconds: Double) throws -> Double? {
        let start = Date()
        while Date().timeIntervalSince(start) < seconds {
            let r = try d.cli(["get"] + arguments)
            if let expected, r.status == Exit.success, r.text == expected { return Date().timeIntervalSince(start) }
            if expected == nil, r.status == Exit.notFound { return Date().timeIntervalSince(start) }
            usleep(20_000)
        }
        return nil
    }

    static func syncNow(_ d: RunningDaemon) throws {
        let r = try d.cli(["sync", "now"])
        #expect(r.status == Exit.success, "\(r.stderr)")
    }

    @Test func anAddUpdateAndDeleteOnAReachBWithSyncNow() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + item, input: bytes("tok-1")).status == Exit.success)
        try Self.syncNow(a)
        try Self.syncNow(b)
        #expect(try b.cli(["get"] + item).text == "tok-1")

        #expect(try a.cli(["update", "--synchronizable"] + item, input: bytes("tok-2")).status == Exit.success)
        try Self.syncNow(a)
        try Self.syncNow(b)
        #expect(try b.cli(["get"] + item).text == "tok-2")

        #expect(try a.cli(["delete", "--synchronizable"] + item).status == Exit.success)
        try Self.syncNow(a)
        try Self.syncNow(b)
        #expect(try b.cli(["get"] + item).status == Exit.notFound)

        let status = try KeychainConnection(socketPath: a.socketPath).syncStatus()
        #expect(status.loop == "ok")
        #expect(status.pushed == 3 && status.outbox == 0)
        #expect(status.lastPass != nil && status.lastError == nil)
        #expect(try KeychainConnection(socketPath: b.socketPath).syncStatus().applied == 3)
    }

    /// B's own passes come 60 s apart (the daemon's pass interval), counted from its last
    /// pass; each change is waited for up to half of that, so only A's notification can have
    /// brought it, however slow the machine.
    @Test func anAddUpdateAndDeleteOnAReachBByItsNotificationWithoutSyncNow() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        // Both threads are connected and listening once each has finished a pass.
        for d in [a, b] { try Self.syncNow(d) }
        let beforeBsNextPass = 30.0
        #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + item, input: bytes("tok")).status == Exit.success)
        let took = try Self.waitForGet(b, item, "tok", within: beforeBsNextPass)
        #expect(took != nil, "the add did not reach b before its own next pass")
        if let took { print("sync: add on a readable on b after \(Int(took * 1000)) ms (notify path, polling b's get)") }

        #expect(try a.cli(["update", "--synchronizable"] + item, input: bytes("tok-2")).status == Exit.success)
        #expect(try Self.waitForGet(b, item, "tok-2", within: beforeBsNextPass) != nil, "the update did not reach b before its own next pass")
        #expect(try a.cli(["delete", "--synchronizable"] + item).status == Exit.success)
        #expect(try Self.waitForGet(b, item, nil, within: beforeBsNextPass) != nil, "the delete did not reach b before its own next pass")
    }

    /// A string as PostgreSQL's text dump of a bytea shows it (hex), and as itself.
    static func forms(_ marker: String) -> [String] {
        [marker, marker.utf8.map { String(format: "%02x", $0) }.joined()]
    }

    @Test func onlySealedRecordsReachTheDatabase() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        let synced = ["--service", "svc-marker-Kf3", "--account", "acct-marker-Hq8", "--label", "label-marker-Pz1"]
        #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + synced, input: bytes("secret-marker-Wv5")).status == Exit.success)
        #expect(try a.cli(["add", "--accessible", "after-first-unlock-this-device-only", "--service", "tdo-svc-Rb2",
                           "--account", "tdo-acct-Rb2"], input: bytes("tdo-secret-Rb2")).status == Exit.success)
        #expect(try a.cli(["add", "--service", "local-svc-Ym6", "--account", "local-acct-Ym6"], input: bytes("local-secret-Ym6")).status == Exit.success)
        try Self.syncNow(a)
        try Self.syncNow(b)
        let found = ["--service", "svc-marker-Kf3", "--account", "acct-marker-Hq8"]
        #expect(try b.cli(["get"] + found).text == "secret-marker-Wv5")  // the synced item did go
        #expect(try b.cli(["list"]).text.contains("label-marker-Pz1"))
        #expect(try b.cli(["get", "--service", "tdo-svc-Rb2"]).status == Exit.notFound)
        #expect(try b.cli(["get", "--service", "local-svc-Ym6"]).status == Exit.notFound)

        let dump = try cluster.dump()
        #expect(dump.contains("sync_records"))
        let markers = ["svc-marker-Kf3", "acct-marker-Hq8", "label-marker-Pz1", "secret-marker-Wv5",
                       "tdo-svc-Rb2", "tdo-acct-Rb2", "tdo-secret-Rb2", "local-svc-Ym6", "local-acct-Ym6", "local-secret-Ym6"]
        for marker in markers {
            for form in Self.forms(marker) { #expect(!dump.contains(form), "the database holds \(marker)") }
        }
    }

    @Test func aChangeMadeWhileTheDatabaseIsDownArrivesAfterItReturns() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        for d in [a, b] { try Self.syncNow(d) }
        let halted = Date()
        try cluster.halt()
        #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + item, input: bytes("while-down")).status == Exit.success)
        #expect(try a.cli(["sync", "now"]).status != Exit.success)
        let down = try KeychainConnection(socketPath: a.socketPath).syncStatus()
        #expect(down.loop == "error" && down.lastError != nil)
        #expect(down.outbox == 1)
        #expect(try a.cli(["get"] + item).text == "while-down")  // the keychain works on without it

        try cluster.resume()
        let downtime = Date().timeIntervalSince(halted)
        // Without a restart: the threads reconnect (sync now cuts a's backoff short).
        try Self.syncNow(a)
        // b's thread waits out its backoff (1 s, doubled after each failed connect, ±25 %), so
        // its next connect comes up to about 2.7 times the downtime after the halt: a slow
        // machine's longer downtime means a longer wait, not a lost change.
        #expect(try Self.waitForGet(b, item, "while-down", within: max(10, 3 * downtime + 5)) != nil)
        let back = try KeychainConnection(socketPath: a.socketPath).syncStatus()
        #expect(back.loop == "ok" && back.outbox == 0 && back.lastError == nil)
    }

    @Test func aRestartedDaemonKeepsItsCursorAndPullsEachChangeOnce() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        for n in 1...3 {
            #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock", "--service", "svc-\(n)", "--account", "x"],
                              input: bytes("v\(n)")).status == Exit.success)
        }
        try Self.syncNow(a)
        try Self.syncNow(b)
        #expect(try b.cli(["get", "--service", "svc-3", "--account", "x"]).text == "v3")

        b.stop()
        for n in 4...5 {
            #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock", "--service", "svc-\(n)", "--account", "x"],
                              input: bytes("v\(n)")).status == Exit.success)
        }
        #expect(try a.cli(["update", "--synchronizable", "--service", "svc-1", "--account", "x"], input: bytes("v1'")).status == Exit.success)
        try Self.syncNow(a)
        try b.start()
        try Self.syncNow(b)

        for (n, value) in [(1, "v1'"), (2, "v2"), (3, "v3"), (4, "v4"), (5, "v5")] {
            #expect(try b.cli(["get", "--service", "svc-\(n)", "--account", "x"]).text == value)
        }
        // The three changes made while b was down, read once: not the five records again.
        let status = try KeychainConnection(socketPath: b.socketPath).syncStatus()
        #expect(status.pulled == 3 && status.applied == 3 && status.rejected == 0)
    }

    @Test func aLockedDeviceHoldsAWhenUnlockedRecordUntilItsUnlock() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        let cb = KeychainConnection(socketPath: b.socketPath)
        try cb.setPasscode(bytes("1234"))
        try cb.lock()
        #expect(try a.cli(["add", "--synchronizable", "--accessible", "when-unlocked"] + item, input: bytes("ak-secret")).status == Exit.success)
        try Self.syncNow(a)
        try Self.syncNow(b)
        #expect(try cb.syncStatus().inbox == 1)

        try cb.unlock(passcode: bytes("1234"))
        try Self.syncNow(b)
        #expect(try b.cli(["get"] + item).text == "ak-secret")
        let status = try cb.syncStatus()
        #expect(status.inbox == 0 && status.applied == 1)
    }

    @Test func aDaemonLockedSinceBootWaitsForItsFirstUnlockThenCatchesUp() throws {
        let cluster = try TestCluster()
        let (a, b) = try Self.circle(cluster)
        try KeychainConnection(socketPath: b.socketPath).setPasscode(bytes("1234"))
        try b.restart()
        let cb = KeychainConnection(socketPath: b.socketPath)
        #expect(try cb.syncStatus().loop == "waitingForUnlock")
        #expect(try b.cli(["sync", "now"]).status == Exit.locked)

        #expect(try a.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + item, input: bytes("after-boot")).status == Exit.success)
        try Self.syncNow(a)
        try cb.unlock(passcode: bytes("1234"))
        try Self.syncNow(b)
        #expect(try b.cli(["get"] + item).text == "after-boot")
    }
}
