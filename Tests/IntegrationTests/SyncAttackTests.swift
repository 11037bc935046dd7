import Foundation
import KeychainClient
import KeychainModel
import Synchronization
import Testing

/// Sync under attack (issue 18 slice 6, docs/sync.md 5, 6, 8 and 11): races resolved the same
/// on every device, rows edited by the database's operator, and a hostile local user, each
/// through real daemons and one throw-away cluster.
@Suite("Sync attacks: races, tampered rows and a hostile local user")
struct SyncAttackTests {
    static func add(_ d: RunningDaemon, _ service: String, _ secret: String) throws {
        let r = try d.cli(["add", "--synchronizable", "--accessible", "after-first-unlock", "--service", service, "--account", "x"],
                          input: bytes(secret))
        #expect(r.status == Exit.success, "\(r.stderr)")
    }

    static func get(_ d: RunningDaemon, _ service: String) throws -> CLIResult {
        try d.cli(["get", "--service", service, "--account", "x"])
    }

    /// The item's attributes as `get --json` prints them and its secret: what must be the same
    /// bytes on every device once they converged.
    static func held(_ d: RunningDaemon, _ service: String) throws -> (attributes: String, secret: [UInt8])? {
        let secret = try get(d, service)
        guard secret.status == Exit.success else { return nil }
        return (try d.cli(["get", "--json", "--service", service, "--account", "x"]).text, secret.stdout)
    }

    @Test func racingUpdatesAndAnUpdateAgainstADeleteEndTheSameOnEveryDeviceWhateverTheOrderOfSync() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncItemsTests.circle(cluster)
        try Self.add(a, "race-1", "v0")
        try Self.add(a, "race-2", "w0")
        try SyncItemsTests.syncNow(a)
        try SyncItemsTests.syncNow(b)
        #expect(try Self.get(b, "race-2").text == "w0")

        try cluster.halt()
        // Item 1: a then b update it; item 2: b updates it, then a deletes it. Later wins.
        #expect(try a.cli(["update", "--synchronizable", "--service", "race-1", "--account", "x"], input: bytes("from-a")).status == Exit.success)
        usleep(5_000)
        #expect(try b.cli(["update", "--synchronizable", "--service", "race-1", "--account", "x"], input: bytes("from-b")).status == Exit.success)
        #expect(try b.cli(["update", "--synchronizable", "--service", "race-2", "--account", "x"], input: bytes("w-from-b")).status == Exit.success)
        usleep(5_000)
        #expect(try a.cli(["delete", "--synchronizable", "--service", "race-2", "--account", "x"]).status == Exit.success)
        try cluster.resume()

        for d in [a, b, b, a] { try SyncItemsTests.syncNow(d) }
        let onA = try Self.held(a, "race-1"), onB = try Self.held(b, "race-1")
        #expect(try Self.get(a, "race-1").text == "from-b")
        #expect(onA != nil && onA?.attributes == onB?.attributes && onA?.secret == onB?.secret)
        #expect(try Self.get(a, "race-2").status == Exit.notFound)
        #expect(try Self.get(b, "race-2").status == Exit.notFound)
        for d in [a, b] {
            let status = try KeychainConnection(socketPath: d.socketPath).syncStatus()
            #expect(status.outbox == 0 && status.rejected == 0 && status.lastError == nil)
        }
    }

    /// The SQL that gives one row (the `index`-th by seq) a new seq, as a new write would, so
    /// that devices past it pull it again; `set` is the rest of its SET list.
    static func rewrite(_ index: Int, set: String) -> String {
        """
        WITH target AS (SELECT circle_id, record_id FROM sync_records ORDER BY seq OFFSET \(index) LIMIT 1),
             next AS (UPDATE sync_circles c SET seq = c.seq + 1 FROM target WHERE c.circle_id = target.circle_id RETURNING c.seq)
        UPDATE sync_records r SET seq = (SELECT seq FROM next), \(set)
        FROM target WHERE r.circle_id = target.circle_id AND r.record_id = target.record_id;
        """
    }

    @Test func rowsEditedInTheDatabaseAreRejectedAndCountedAndTheItemsStayAsTheyWere() throws {
        let cluster = try TestCluster()
        let (a, b) = try SyncItemsTests.circle(cluster)
        let services = (0..<8).map { "tamper-\($0)" }
        for (n, service) in services.enumerated() { try Self.add(a, service, "secret-\(n)") }
        try SyncItemsTests.syncNow(a)
        try SyncItemsTests.syncNow(b)
        // An older version of item 7, captured before a updates it: the replay below.
        let captured = try cluster.sql("SELECT encode(body, 'hex'), mdat, counter FROM sync_records ORDER BY seq OFFSET 7 LIMIT 1")
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map(String.init)
        #expect(captured.count == 3)
        #expect(try a.cli(["update", "--synchronizable", "--service", "tamper-7", "--account", "x"], input: bytes("secret-7'")).status == Exit.success)
        try SyncItemsTests.syncNow(a)
        try SyncItemsTests.syncNow(b)
        let before = try KeychainConnection(socketPath: b.socketPath).syncStatus()
        #expect(before.rejected == 0)
        var held: [String: String] = [:]
        for service in services { held[service] = try Self.held(b, service)?.attributes }

        // Rows 0-6 were written by a's first push in order; row 7 (seq 9) is item 7's update.
        try cluster.sql(Self.rewrite(0, set: "body = set_byte(body, 40, get_byte(body, 40) # 1)"))
        try cluster.sql("""
            WITH one AS (SELECT record_id, body FROM sync_records ORDER BY seq OFFSET 1 LIMIT 1),
                 two AS (SELECT record_id, body FROM sync_records ORDER BY seq OFFSET 2 LIMIT 1)
            UPDATE sync_records r SET body = CASE WHEN r.record_id = one.record_id THEN two.body ELSE one.body END
            FROM one, two WHERE r.record_id IN (one.record_id, two.record_id);
            """)
        // The swapped pair moves past the cursor one row at a time (each rewrite takes the
        // lowest remaining seq, so offset 1 twice after the flipped row left offset 0).
        try cluster.sql(Self.rewrite(0, set: "mdat = mdat"))
        try cluster.sql(Self.rewrite(0, set: "mdat = mdat"))
        try cluster.sql(Self.rewrite(0, set: "mdat = mdat + 1000"))
        try cluster.sql(Self.rewrite(0, set: "writer = set_byte(writer, 0, get_byte(writer, 0) # 1)"))
        try cluster.sql(Self.rewrite(0, set: "counter = counter + 1"))
        try cluster.sql(Self.rewrite(0, set: "epoch = epoch + 1"))
        try cluster.sql(Self.rewrite(0, set: "body = decode('\(captured[0])', 'hex'), mdat = \(captured[1]), counter = \(captured[2])"))

        let sync = try b.cli(["sync", "now"])
        #expect(sync.status == Exit.success, "\(sync.stderr)")
        let after = try KeychainConnection(socketPath: b.socketPath).syncStatus()
        #expect(after.rejected - before.rejected == 8, "rejected \(after.rejected - before.rejected) of 8 edited rows")
        #expect(after.applied == before.applied)
        for (n, service) in services.enumerated() {
            #expect(try Self.get(b, service).text == (n == 7 ? "secret-7'" : "secret-\(n)"), "\(service)")
            #expect(try Self.held(b, service)?.attributes == held[service], "\(service)")
        }
        // The daemon serves on, and its thread keeps syncing what is genuine.
        try Self.add(a, "after-tamper", "genuine")
        try SyncItemsTests.syncNow(a)
        try SyncItemsTests.syncNow(b)
        #expect(try Self.get(b, "after-tamper").text == "genuine")
    }

    /// Three members: a founded, b and c approved by a. Returns c's fingerprint.
    static func threeMembers(_ a: RunningDaemon, _ b: RunningDaemon, _ c: RunningDaemon) throws -> String {
        let ca = KeychainConnection(socketPath: a.socketPath)
        let circle = try ca.syncCreate(name: "a").circle
        var prints: [String] = []
        for (d, name) in [(b, "b"), (c, "c")] {
            let print = try KeychainConnection(socketPath: d.socketPath).syncJoin(circle: circle, name: name).device
            _ = try ca.syncApprove(device: print)
            #expect(try KeychainConnection(socketPath: d.socketPath).syncStatus().state == "member")
            prints.append(print)
        }
        return prints[1]
    }

    @Test func afterARemovalAnAddReachesTheRemainingMemberAndNeverTheRemovedOne() throws {
        let cluster = try TestCluster()
        let a = try SyncCircleTests.daemon(cluster), b = try SyncCircleTests.daemon(cluster), c = try SyncCircleTests.daemon(cluster)
        let cPrint = try Self.threeMembers(a, b, c)
        try Self.add(a, "before-removal", "all-three")
        for d in [a, b, c] { try SyncItemsTests.syncNow(d) }
        #expect(try Self.get(c, "before-removal").text == "all-three")

        let removed = try a.cli(["sync", "remove", cPrint])
        #expect(removed.status == Exit.success, "\(removed.stderr)")
        try Self.add(a, "after-removal", "not-for-c")
        try SyncItemsTests.syncNow(a)
        try SyncItemsTests.syncNow(b)
        #expect(try c.cli(["sync", "now"]).status != Exit.success)

        #expect(try Self.get(b, "after-removal").text == "not-for-c")
        #expect(try Self.get(c, "after-removal").status == Exit.notFound)
        #expect(try Self.get(c, "before-removal").text == "all-three")  // what it held, it keeps
        let bStatus = try KeychainConnection(socketPath: b.socketPath).syncStatus()
        #expect(bStatus.epoch == 2 && bStatus.members == 2 && bStatus.state == "member")
        #expect(try KeychainConnection(socketPath: c.socketPath).syncStatus().state == "removed")
        // The sealed record is in the store, under the epoch c holds no key for.
        #expect(try cluster.sql("SELECT count(*) FROM sync_records WHERE epoch = 1").trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    /// Sessions the cluster has seen end, as pg_stat_database counts them (read after a pause:
    /// backends report at exit).
    static func sessions(_ cluster: TestCluster) throws -> Int {
        usleep(1_200_000)
        let text = try cluster.sql("SELECT sessions FROM pg_stat_database WHERE datname = 'keychaind'")
        return Int(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test func aFloodOfSyncCallsFromAnotherLocalUserOpensNoSessionPerCallAndDoesNotStallGets() throws {
        let cluster = try TestCluster()
        let user = try MultiUserTests.user("kcapp-a")
        let config = """
            socket_mode = "0666"
            admin_uids = [0]
            [[app]]
            id = "app.a"
            uids = [\(user)]
            groups = ["a.private"]
            [[app]]
            id = "owner"
            uids = [0]
            groups = ["owner.private"]
            """
        let a = try SyncCircleTests.daemon(cluster, extra: config), b = try SyncCircleTests.daemon(cluster)
        let ca = KeychainConnection(socketPath: a.socketPath)
        _ = try ca.syncApprove(device: try KeychainConnection(socketPath: b.socketPath).syncJoin(circle: try ca.syncCreate(name: "a").circle, name: "b").device)
        try Self.add(a, "served", "still-here")
        try SyncItemsTests.syncNow(a)
        for args in [["sync", "approve", String(repeating: "1", count: 32)], ["sync", "remove", String(repeating: "1", count: 32)],
                     ["sync", "leave"], ["sync", "create", "--name", "x"]] {
            #expect(try a.cli(args, asUser: user).status == Exit.denied, "\(args)")
        }
        #expect(try a.cli(["sync", "status"], asUser: user).status == Exit.success)

        let start = try Self.sessions(cluster)
        let calls = [["sync", "status"], ["sync", "devices"], ["sync", "status"], ["sync", "now"]]
        let failedGets = Mutex(0), failedCalls = Mutex([String]())
        DispatchQueue.concurrentPerform(iterations: 5) { worker in
            if worker == 0 {
                // The owner's gets while the flood runs: each answered with its item (that other
                // calls are answered while a sync call waits on the database is SyncCircleTests'
                // behaviour check; no wall-clock bound here, the machine is shared).
                for _ in 0..<20 where (try? Self.get(a, "served"))?.text != "still-here" {
                    failedGets.withLock { $0 += 1 }
                }
                return
            }
            for n in 0..<16 {
                let args = calls[(n + worker) % calls.count]
                let r = try? a.cli(args, asUser: user)
                if r?.status != Exit.success { failedCalls.withLock { $0.append("\(args): \(r?.stderr ?? "no answer")") } }
            }
        }
        #expect(failedGets.withLock { $0 } == 0)
        #expect(failedCalls.withLock { $0 }.isEmpty, "\(failedCalls.withLock { $0 })")
        let opened = try Self.sessions(cluster) - start
        // 64 calls: the kept connection, psql's own session and the loop's reconnects at most.
        #expect(opened >= 0 && opened <= 4, "\(opened) sessions for 64 sync calls")
    }

    /// A daemon on `cluster` that `user` may call (an app, not an admin).
    static func daemonWithAnotherUser(_ cluster: TestCluster, _ user: UInt32) throws -> RunningDaemon {
        try SyncCircleTests.daemon(cluster, extra: """
            socket_mode = "0666"
            admin_uids = [0]
            [[app]]
            id = "app.a"
            uids = [\(user)]
            groups = ["a.private"]
            """)
    }

    static func lastError(_ d: RunningDaemon, asUser user: UInt32? = nil) throws -> String? {
        let r = try d.cli(["sync", "status", "--json"], asUser: user)
        #expect(r.status == Exit.success, "\(r.stderr)")
        let object = try JSONSerialization.jsonObject(with: Data(r.stdout)) as? [String: Any] ?? [:]
        return object["last_error"] as? String
    }

    /// What a local user learns of the database from a failure: the host and port of the
    /// connection are in libpq's message.
    static func names(_ cluster: TestCluster) -> [String] {
        let address = cluster.url.split(separator: "@")[1].split(separator: "/")[0].split(separator: ":")
        return ["127.0.0.1", "port \(address[1])", "\"keychaind\""]
    }

    @Test func anotherLocalUserSeesOnlyThatTheDatabaseIsUnreachableNotWhereItIs() throws {
        let cluster = try TestCluster()
        let user = try MultiUserTests.user("kcapp-a")
        let a = try Self.daemonWithAnotherUser(cluster, user)
        _ = try KeychainConnection(socketPath: a.socketPath).syncCreate(name: "a")
        try SyncItemsTests.syncNow(a)
        try cluster.halt()
        let adminNow = try a.cli(["sync", "now"])
        #expect(adminNow.status != Exit.success)
        // The admin sees libpq's message (no password is in it: PostgresConnection strips it).
        let adminError = try Self.lastError(a) ?? ""
        #expect(adminError.contains("127.0.0.1"), "\(adminError)")

        #expect(try Self.lastError(a, asUser: user) == "errSecNotAvailable (-25291): the sync database is unreachable")
        let now = try a.cli(["sync", "now"], asUser: user), devices = try a.cli(["sync", "devices"], asUser: user)
        #expect(now.status == adminNow.status && devices.status != Exit.success)
        for r in [now, devices] {
            #expect(r.stderr.contains("the sync database is unreachable"), "\(r.stderr)")
            for name in Self.names(cluster) { #expect(!r.stderr.contains(name), "\(r.stderr)") }
        }
    }

    @Test func anotherLocalUserSeesOnlyThatTheDatabaseRefusedTheLogin() throws {
        let cluster = try TestCluster()
        let user = try MultiUserTests.user("kcapp-a")
        let a = try Self.daemonWithAnotherUser(cluster, user)
        // A wrong password in the passfile (still 0600): every new connection is refused.
        let passfile = a.root + "/pgpass"
        let line = try String(contentsOfFile: passfile, encoding: .utf8)
        try line.replacingOccurrences(of: cluster.password, with: "not-the-password").write(toFile: passfile, atomically: false, encoding: .utf8)
        let create = try a.cli(["sync", "create", "--name", "a"])
        #expect(create.status == Exit.authFailed, "\(create.stderr)")
        let adminError = try Self.lastError(a) ?? ""
        #expect(adminError.contains("authentication failed"), "\(adminError)")

        let seen = try Self.lastError(a, asUser: user) ?? ""
        #expect(seen == "errSecAuthFailed (-25293): the sync database refused the login")
        for name in Self.names(cluster) { #expect(!seen.contains(name), "\(seen)") }
        let devices = try a.cli(["sync", "devices"], asUser: user)
        #expect(devices.status == Exit.authFailed && devices.stderr.contains("the sync database refused the login"), "\(devices.stderr)")
    }
}
