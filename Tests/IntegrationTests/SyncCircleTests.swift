import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Sync membership end to end (docs/sync.md, 3 and 11, "join and approve"): two real daemons
/// with their own state and device keys, one throw-away PostgreSQL cluster, the client library
/// and the CLI.
@Suite("Sync circle: create, join, approve through two daemons")
struct SyncCircleTests {
    /// A daemon whose `[sync] database` is `cluster`, its password in a 0600 passfile.
    static func daemon(_ cluster: TestCluster, extra: String = "") throws -> RunningDaemon {
        let d = try RunningDaemon(config: extra, start: false)
        let passfile = d.root + "/pgpass"
        let address = cluster.url.split(separator: "@")[1].split(separator: "/")[0].split(separator: ":")
        try "\(address[0]):\(address[1]):keychaind:keychaind:\(cluster.password)\n".write(toFile: passfile, atomically: true, encoding: .utf8)
        chmod(passfile, 0o600)
        let section = "\n[sync]\ndatabase = \"host=\(address[0]) port=\(address[1]) dbname=keychaind user=keychaind passfile=\(passfile)\"\n"
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: d.configPath))
        handle.seekToEndOfFile()
        handle.write(Data(section.utf8))
        try handle.close()
        try d.start()
        return d
    }

    static let statusKeys: Set<String> = ["state", "circle", "device", "epoch", "members", "outbox", "last_error",
                                          "loop", "last_pass", "inbox", "pushed", "pulled", "applied", "rejected",
                                          "rollbacks_healed", "heads_rejected", "last_rollback"]

    @Test func aDeviceJoinsWithTheCircleDigitsAndAfterApprovalIsAMemberOfTheSameCircleAndEpoch() throws {
        let cluster = try TestCluster()
        let a = try Self.daemon(cluster), b = try Self.daemon(cluster)
        let ca = KeychainConnection(socketPath: a.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        let made = try ca.syncCreate(name: "a")
        #expect(made.circle.count == 32)

        let joined = try b.cli(["sync", "join", "--circle", made.circle, "--name", "b"])
        #expect(joined.status == Exit.success, "\(joined.stderr)")
        let bPrint = String(joined.text.trimmingCharacters(in: .whitespacesAndNewlines).dropFirst("device: ".count))
        #expect(try cb.syncStatus().state == "pending")
        #expect(try cb.syncStatus().deviceFingerprint == bPrint.replacingOccurrences(of: " ", with: ""))

        let approved = try a.cli(["sync", "approve", bPrint])
        #expect(approved.status == Exit.success, "\(approved.stderr)")
        let status = try cb.syncStatus()
        #expect(status.state == "member")
        #expect(status.circleFingerprint == made.circle)
        let aEpoch = try ca.syncStatus().epoch
        #expect(status.epoch == 1 && status.epoch == aEpoch)
        #expect(status.members == 2)
        #expect(try ca.syncDevices().map(\.name) == ["a", "b"])

        let line = try b.cli(["sync", "status"]).text
        #expect(line.contains("state: member"))
        #expect(line.contains("circle: \(made.circle.prefix(4)) "))
    }

    @Test func approvingWithOneDigitWrongIsNotFoundAndTheDeviceStaysPending() throws {
        let cluster = try TestCluster()
        let a = try Self.daemon(cluster), b = try Self.daemon(cluster)
        let ca = KeychainConnection(socketPath: a.socketPath), cb = KeychainConnection(socketPath: b.socketPath)
        let bPrint = try cb.syncJoin(circle: try ca.syncCreate(name: "a").circle, name: "b").device
        var wrong = Array(bPrint.utf8)
        wrong[0] = wrong[0] == UInt8(ascii: "9") ? UInt8(ascii: "0") : wrong[0] + 1
        #expect(try a.cli(["sync", "approve", String(decoding: wrong, as: UTF8.self)]).status == Exit.notFound)
        #expect(try cb.syncStatus().state == "pending")
        #expect(try ca.syncDevices().map(\.isMember) == [true, false])
    }

    @Test func withoutASyncSectionEverySyncCallIsNotAvailableNamingTheKey() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let calls: [() throws -> Void] = [
            { _ = try c.syncStatus() }, { _ = try c.syncCreate(name: "x") }, { _ = try c.syncDevices() },
            { _ = try c.syncJoin(circle: String(repeating: "1", count: 32), name: "x") },
            { _ = try c.syncApprove(device: String(repeating: "1", count: 32)) },
        ]
        for call in calls {
            do {
                try call()
                Issue.record("a sync call succeeded without [sync]")
            } catch let error as KeychainError {
                #expect(error.status == .notAvailable)
                #expect(error.message.contains("[sync]") && error.message.contains("database"))
            }
        }
    }

    @Test func aConninfoWithAPasswordStopsTheDaemonAtLoadWithoutRepeatingIt() throws {
        let d = try RunningDaemon(config: "[sync]\ndatabase = \"host=127.0.0.1 dbname=k user=k password=hunter2-secret\"", start: false)
        #expect(throws: (any Error).self) { try d.start() }
        #expect(d.log.contains("passfile"))
        #expect(!d.log.contains("hunter2-secret"))
    }

    @Test func aRemoteHostBelowVerifyFullAndAPassfileOthersCanReadAreRefusedAtLoad() throws {
        let remote = try RunningDaemon(config: "[sync]\ndatabase = \"host=db.example.org dbname=k user=k sslmode=require\"", start: false)
        #expect(throws: (any Error).self) { try remote.start() }
        #expect(remote.log.contains("verify-full"))

        let loose = try RunningDaemon(start: false)
        let passfile = loose.root + "/pgpass"
        try "*:*:*:*:pw\n".write(toFile: passfile, atomically: true, encoding: .utf8)
        chmod(passfile, 0o644)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: loose.configPath))
        handle.seekToEndOfFile()
        handle.write(Data("\n[sync]\ndatabase = \"host=127.0.0.1 dbname=k user=k passfile=\(passfile)\"\n".utf8))
        try handle.close()
        #expect(throws: (any Error).self) { try loose.start() }
        #expect(loose.log.contains("0600"))
    }

    @Test func otherCallsGoOnWhileASyncCallWaitsForTheDatabase() throws {
        let server = try SilentServer()
        // The create can end only when this test closes the server (or after 30 s).
        let d = try RunningDaemon(config: "[sync]\ndatabase = \"host=127.0.0.1 port=\(server.port) dbname=k user=k connect_timeout=30\"")
        let socketPath = d.socketPath
        _ = try KeychainConnection(socketPath: socketPath).add(["class": .string("genp"), "svce": .string("s"), "acct": .string("a"),
                                                                "v_Data": .data(Array("v".utf8))])
        let done = DispatchSemaphore(value: 0)
        let createStatus = Locked<KeychainStatus?>(nil)
        Thread.detachNewThread {
            do {
                _ = try KeychainConnection(socketPath: socketPath).syncCreate(name: "a")
            } catch let error as KeychainError {
                createStatus.withLock { $0 = error.status }
            } catch {}
            done.signal()
        }
        // Its connection reaching the server says the create is now waiting for it: no fixed sleep.
        var pending = pollfd(fd: server.fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pending, 1, 20_000) == 1 else {
            Issue.record("the create never connected")
            return
        }
        var held = accept(server.fd, nil, nil)
        defer { if held >= 0 { close(held) } }

        // A get and an update are answered while the create still waits: the store is not held
        // across its database call. Were they queued behind it, they would wait out its 30 s.
        let answered = DispatchSemaphore(value: 0)
        let callError = Locked<String?>(nil)
        Thread.detachNewThread {
            do {
                let c = KeychainConnection(socketPath: socketPath)
                _ = try c.copyMatching(["class": .string("genp"), "svce": .string("s"), "r_Data": .bool(true)])
                try c.update(["class": .string("genp"), "svce": .string("s")], ["labl": .string("L")])
            } catch {
                callError.withLock { $0 = "\(error)" }
            }
            answered.signal()
        }
        #expect(answered.wait(timeout: .now() + 15) == .success, "the get and update waited for the sync call")
        #expect(callError.withLock { $0 } == nil, "\(callError.withLock { $0 } ?? "")")
        #expect(done.wait(timeout: .now()) == .timedOut, "the create ended before the server went away")

        // The server goes away: the create fails, not available.
        close(held)
        held = -1
        server.close()
        #expect(done.wait(timeout: .now() + 40) == .success)
        #expect(createStatus.withLock { $0 } == .notAvailable)
    }

    /// A second local user, allowed to connect (an [[app]]) but not an admin.
    @Test func aNonAdminCallerIsRefusedTheAdminCallsAndItsStatusShowsNoKey() throws {
        let cluster = try TestCluster()
        let user = try MultiUserTests.user("kcsync-user")
        let d = try Self.daemon(cluster, extra: """
            socket_mode = "0666"
            admin_uids = [0]
            [[app]]
            id = "other"
            uids = [\(user)]
            groups = ["other"]
            """)
        let made = try KeychainConnection(socketPath: d.socketPath).syncCreate(name: "a")
        for args in [["sync", "create"], ["sync", "join", "--circle", made.circle], ["sync", "approve", made.device]] {
            let r = try d.cli(args, asUser: user)
            #expect(r.status == Exit.denied, "\(args): \(r.stderr)")
            #expect(r.stderr.contains("admin"), "\(args)")
        }
        let status = try d.cli(["sync", "status", "--json"], asUser: user)
        #expect(status.status == Exit.success, "\(status.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(status.stdout)) as? [String: Any] ?? [:]
        #expect(Set(object.keys).isSubset(of: Self.statusKeys), "\(object.keys)")
        #expect(object["circle"] as? String == made.circle)
        let devices = try d.cli(["sync", "devices", "--json"], asUser: user)
        #expect(devices.status == Exit.success, "\(devices.stderr)")
        #expect(devices.text.contains(made.device))
    }
}
