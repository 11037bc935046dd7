import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Attacks on the sync pieces of the rollback, follow and caller-dependent error work (the
/// sync-review task): a local user who keeps the database's kept connection busy, and a
/// keychain that moves from one circle to another.
extension SyncAttackTests {
    /// `d`'s `[sync] database` set to `conninfo` (its daemon stopped and started again).
    static func pointDatabase(of d: RunningDaemon, at conninfo: String) throws {
        d.stop()
        let config = try String(contentsOfFile: d.configPath, encoding: .utf8)
        let lines = config.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasPrefix("database = ") ? "database = \"\(conninfo)\"" : String(line)
        }
        try lines.joined(separator: "\n").write(toFile: d.configPath, atomically: true, encoding: .utf8)
        try d.start()
    }

    /// Accepts the next connection `server` completes (holding it open), at most `seconds`.
    static func acceptNext(_ server: Int32, within seconds: Int32) -> Int32? {
        var pending = pollfd(fd: server, events: Int16(POLLIN), revents: 0)
        guard poll(&pending, 1, seconds * 1000) == 1 else { return nil }
        let fd = accept(server, nil, nil)
        return fd >= 0 ? fd : nil
    }

    @Test func aStatusIsAnsweredWhileAnotherLocalUsersStatusWaitsOnASilentDatabase() throws {
        let cluster = try TestCluster()
        let user = try MultiUserTests.user("kcapp-a")
        let a = try Self.daemonWithAnotherUser(cluster, user)
        _ = try KeychainConnection(socketPath: a.socketPath).syncCreate(name: "a")
        // The database host now completes connections and never speaks, and no connect_timeout
        // bounds the wait: a status that connects waits until this test closes the server.
        let server = try SilentServer()
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        try Self.pointDatabase(of: a, at: "host=127.0.0.1 port=\(server.port) dbname=k user=k connect_timeout=0")
        // The sync thread connects first, at the daemon's start.
        guard let loop = Self.acceptNext(server.fd, within: 20) else {
            Issue.record("the sync thread never connected")
            return
        }
        held.append(loop)

        let theirs = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try? a.cli(["sync", "status"], asUser: user)
            theirs.signal()
        }
        // Its connection reaching the server says the other user's status now waits on it.
        guard let waiting = Self.acceptNext(server.fd, within: 20) else {
            Issue.record("the other user's status never connected")
            return
        }
        held.append(waiting)

        // The owner's status, and another of the same user, are answered from what the
        // keychain knows while that status still waits: they do not queue behind it. Were
        // they queued, they would wait until the server closes.
        let answered = DispatchSemaphore(value: 0)
        let states = Locked<[String]>([])
        Thread.detachNewThread {
            for asUser in [nil, user] {
                let r = try? a.cli(["sync", "status", "--json"], asUser: asUser)
                let object = r.flatMap { try? JSONSerialization.jsonObject(with: Data($0.stdout)) as? [String: Any] }
                states.withLock { $0.append(object?["state"] as? String ?? "no answer: \(r?.stderr ?? "")") }
            }
            answered.signal()
        }
        let inTime = answered.wait(timeout: .now() + 15) == .success
        #expect(inTime, "a status waited for another caller's connect")
        #expect(theirs.wait(timeout: .now()) == .timedOut, "the other user's status ended before the server went away")

        for fd in held { close(fd) }
        held = []
        server.close()
        if !inTime { _ = answered.wait(timeout: .now() + 40) }
        #expect(states.withLock { $0 } == ["member", "member"], "\(states.withLock { $0 })")
        #expect(theirs.wait(timeout: .now() + 40) == .success)
    }

    @Test func itemsSyncedInACircleTheKeychainLeftStayAndGoToTheNextCircleItCreates() throws {
        let cluster = try TestCluster()
        let a = try SyncCircleTests.daemon(cluster), b = try SyncCircleTests.daemon(cluster)
        let ca = KeychainConnection(socketPath: a.socketPath)
        _ = try ca.syncCreate(name: "a")
        try Self.add(a, "kept", "synced-in-the-first-circle")
        try SyncItemsTests.syncNow(a)
        #expect(try a.cli(["sync", "leave"]).status == Exit.success)
        #expect(try Self.get(a, "kept").text == "synced-in-the-first-circle")

        let second = try ca.syncCreate(name: "a")
        try SyncItemsTests.syncNow(a)
        #expect(try Self.get(a, "kept").text == "synced-in-the-first-circle")
        _ = try ca.syncApprove(device: try KeychainConnection(socketPath: b.socketPath).syncJoin(circle: second.circle, name: "b").device)
        try SyncItemsTests.syncNow(a)
        try SyncItemsTests.syncNow(b)
        #expect(try Self.get(b, "kept").text == "synced-in-the-first-circle")
        #expect(try Self.get(a, "kept").text == "synced-in-the-first-circle")
    }
}

extension SyncAttackTests {
    @Test func aFloodOfSyncNowFromAnotherLocalUserWhileTheDatabaseFailsIsNotAFloodOfConnects() throws {
        let cluster = try TestCluster()
        let user = try MultiUserTests.user("kcapp-a")
        let a = try Self.daemonWithAnotherUser(cluster, user)
        _ = try KeychainConnection(socketPath: a.socketPath).syncCreate(name: "a")
        // The database host now takes each connection and drops it at once: every connect
        // fails fast, so only keychaind's own pacing limits how often it connects.
        let server = try SilentServer()
        let connects = Locked(0), closing = Locked(false)
        let serverGone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            while !closing.withLock({ $0 }) {
                var pending = pollfd(fd: server.fd, events: Int16(POLLIN), revents: 0)
                guard poll(&pending, 1, 100) == 1 else { continue }
                let fd = accept(server.fd, nil, nil)
                if fd >= 0 {
                    connects.withLock { $0 += 1 }
                    close(fd)
                }
            }
            server.close()
            serverGone.signal()
        }
        defer {
            closing.withLock { $0 = true }
            serverGone.wait()
        }
        try Self.pointDatabase(of: a, at: "host=127.0.0.1 port=\(server.port) dbname=k user=k")

        let start = ContinuousClock.now
        let answers = Locked([Int32]())
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            for _ in 0..<5 {
                let status = (try? a.cli(["sync", "now"], asUser: user))?.status ?? -1
                answers.withLock { $0.append(status) }
            }
        }
        let elapsed = ContinuousClock.now - start
        // Each call is answered with the failure...
        #expect(answers.withLock { $0.count == 20 && $0.allSatisfy { $0 != Exit.success && $0 != -1 } }, "\(answers.withLock { $0 })")
        // ...and the daemon connected about once per second of the flood (its first retry),
        // not once per call. The bound grows with the flood's own length, so a slow machine
        // does not break it.
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let allowed = Int(seconds.rounded(.up)) + 3
        #expect(connects.withLock { $0 } <= allowed, "\(connects.withLock { $0 }) connects in \(elapsed) for 20 calls")
    }
}
