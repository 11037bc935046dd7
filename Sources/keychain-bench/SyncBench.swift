// `--sync N`: the two sync figures of issue 18 (docs/sync.md 12, docs/performance.md), with real
// daemons on one throw-away PostgreSQL cluster (scripts/pg-cluster): an add on A readable on B
// by the NOTIFY path, and a first sync of many items onto a device that joins afterwards.
import Foundation
import KeychainClient
import KeychainModel

/// A throw-away cluster made by scripts/pg-cluster, which lives in the source tree (found from
/// this file's path, as the Secret Service driver is), with fsync on as on a real server (the
/// tests' clusters run without it).
struct BenchCluster {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/pg-cluster").path
    let dir: String
    let port: String
    let password: String

    /// Output goes to a file, not a pipe: the server inherits the script's descriptors, so a
    /// pipe would stay open for the server's lifetime (docs/sync.md 12.3).
    static func run(_ args: [String], env: [String: String] = [:]) -> (ok: Bool, output: String) {
        let out = "/tmp/kcbench.\(getpid()).out"
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let argv = args.map { strdup($0) } + [nil]
        let envp = ProcessInfo.processInfo.environment.merging(env) { $1 }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawn(&pid, args[0], &actions, nil, argv, envp) == 0 else { return (false, "") }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        let output = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        unlink(out)
        return (status == 0, output)
    }

    static func start() -> BenchCluster? {
        let dir = "/tmp/kcbench.\(getpid()).pg"
        guard FileManager.default.isExecutableFile(atPath: script), run([script, "start", dir], env: ["PGCLUSTER_FSYNC": "on"]).ok,
              let port = try? String(contentsOfFile: dir + "/port", encoding: .utf8),
              let password = try? String(contentsOfFile: dir + "/password", encoding: .utf8) else { return nil }
        return BenchCluster(dir: dir, port: port.trimmingCharacters(in: .whitespacesAndNewlines),
                            password: password.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    func stop() { _ = Self.run([Self.script, "stop", dir]) }

    /// The `[sync]` section of a daemon whose state lives in `root`; the password goes to a
    /// 0600 passfile there, as the daemon requires, never into the config.
    func syncConfig(root: String) -> String? {
        mkdir(root, 0o700)
        let passfile = root + "/pgpass"
        guard FileManager.default.createFile(atPath: passfile, contents: Data("127.0.0.1:\(port):keychaind:keychaind:\(password)\n".utf8),
                                             attributes: [.posixPermissions: 0o600]) else { return nil }
        return "[sync]\ndatabase = \"host=127.0.0.1 port=\(port) dbname=keychaind user=keychaind passfile=\(passfile)\"\n"
    }

    /// pg_database_size of the circle's database, through psql with the passfile (no password
    /// in argv or the environment).
    func databaseBytes(passfile: String) -> Int? {
        let candidates = ["/usr/bin/psql"] + ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted().reversed().map { "/usr/lib/postgresql/\($0)/bin/psql" }
        guard let psql = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else { return nil }
        let r = Self.run([psql, "-h", "127.0.0.1", "-p", port, "-U", "keychaind", "-d", "keychaind", "-tAc",
                          "select pg_database_size('keychaind')"], env: ["PGPASSFILE": passfile])
        return r.ok ? Int(r.output.trimmingCharacters(in: .whitespacesAndNewlines)) : nil
    }
}

/// The load average now (1, 5, 15 minutes), to print beside the figures: the machine is shared.
func loadAverage() -> String {
    ((try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8)) ?? "?").split(separator: " ").prefix(3).joined(separator: " ")
}

func syncBench(samples: Int, bulk: Int) -> Never {
    guard let cluster = BenchCluster.start() else {
        print("sync: cannot start a cluster with \(BenchCluster.script) (scripts/install-deps installs postgresql)")
        exit(1)
    }
    /// Each running daemon's stop (it also removes its directory), by name.
    var stops: [String: () -> Void] = [:]
    func finish(_ code: Int32) -> Never {
        stops.values.forEach { $0() }
        cluster.stop()
        exit(code)
    }
    func root(_ name: String) -> String { "/tmp/kcbench.\(getpid())sync\(name)" }
    func daemon(_ name: String) -> KeychainConnection {
        guard let config = cluster.syncConfig(root: root(name)) else {
            print("sync: cannot write \(root(name))/pgpass")
            finish(1)
        }
        let (p, socket, dir) = startDaemon(suffix: "sync\(name)", config: config)
        stops[name] = { p.terminate(); p.waitUntilExit(); try? FileManager.default.removeItem(atPath: dir) }
        return KeychainConnection(socketPath: socket, busyPollMicroseconds: options.clientPollMicroseconds)
    }
    /// `sync now` until a pass finishes; a pass longer than keychaind's bound answers
    /// errSecNotAvailable while it carries on.
    func syncNow(_ c: KeychainConnection) {
        for _ in 0..<20 {
            do { try c.syncNow(); return } catch where error.status == .notAvailable { continue } catch {
                print("sync: sync now failed: \(error)")
                finish(1)
            }
        }
    }
    print("keychain-bench --sync: \(ProcessInfo.processInfo.activeProcessorCount) cores, load \(loadAverage())")

    let a = daemon("A"), b = daemon("B")
    do {
        let circle = try a.syncCreate(name: "a").circle
        _ = try a.syncApprove(device: try b.syncJoin(circle: circle, name: "b").device)
        guard try b.syncStatus().state == "member" else { print("sync: b did not become a member"); finish(1) }
    } catch {
        print("sync: forming the circle failed: \(error)")
        finish(1)
    }
    // Each thread is connected and LISTENing once it has finished a pass.
    syncNow(a)
    syncNow(b)

    // 1. Add on A, then B's copyMatching every millisecond until it finds the item: the
    //    latency a person sees, with no `sync now` (A's write wakes its loop, NOTIFY wakes B's).
    var latencies: [UInt64] = []
    for i in 0..<samples {
        let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("sync-latency"),
                                          "acct": .string("account-\(i)"), "sync": .int(1)]
        let t0 = now()
        do { try a.add(query.merging(["v_Data": .data(Array("secret-\(i)".utf8)), "pdmn": .string("ck")]) { $1 }) } catch {
            print("sync: add \(i) on a failed: \(error)")
            finish(1)
        }
        while true {
            do { _ = try b.copyMatching(query); break } catch where error.status == .itemNotFound {
                if now() - t0 > 10_000_000_000 { print("sync: item \(i) did not reach b within 10 s"); finish(1) }
                usleep(1_000)
            } catch {
                print("sync: get \(i) on b failed: \(error)")
                finish(1)
            }
        }
        latencies.append(now() - t0)
    }
    let lat = latencies.sorted()
    print(String(format: "sync-latency add on A -> found on B  n=%d  p50=%.1fms  p90=%.1fms  max=%.1fms  (load %@)",
                 samples, percentile(lat, 0.5) / 1000, percentile(lat, 0.9) / 1000, Double(lat.last ?? 0) / 1e6, loadAverage()))
    fflush(nil)

    guard bulk > 0 else { finish(0) }
    // 2. First sync onto a new device. B stops first so that it does not pull the bulk
    //    alongside the adds and C's first sync (the machine has two cores).
    stops.removeValue(forKey: "B")?()
    let writer = a.socketPath
    let adds = measure(clients: 8, count: bulk, socket: writer) { conn, i in
        try conn.add(["class": .string("genp"), "svce": .string("sync-bulk"), "acct": .string("account-\(i)"), "sync": .int(1),
                      "pdmn": .string("ck"), "v_Data": .data(Array("secret-value-\(i)".utf8))])
    }
    var t0 = now()
    repeat { syncNow(a) } while ((try? a.syncStatus().outbox) ?? 1) > 0
    let pushSeconds = Double(now() - t0) / 1e9
    print(String(format: "sync-bulk   %d sync=1 adds on A (8 clients) %.1fs (%.0f/s); outbox drained by sync now %.1fs later",
                 bulk, adds.seconds, Double(bulk) / adds.seconds, pushSeconds))
    fflush(nil)

    let c = daemon("C")
    let total = samples + bulk
    do {
        let device = try c.syncJoin(circle: try a.syncStatus().circleFingerprint ?? "", name: "c").device
        t0 = now()
        _ = try a.syncApprove(device: device)
    } catch {
        print("sync: c's join failed: \(error)")
        finish(1)
    }
    // A thread keeps asking C for passes (`sync now` waits for C's own sync thread) while this
    // one samples C's status every 50 ms: when the first record lands, and the steady rate after.
    final class Driving: @unchecked Sendable {
        let lock = NSLock()
        var done = false
    }
    let driving = Driving()
    let driverSocket = c.socketPath
    let driver = Thread {
        let conn = KeychainConnection(socketPath: driverSocket)
        while !driving.lock.withLock({ driving.done }) {
            do { try conn.syncNow() } catch { usleep(50_000) }
        }
    }
    driver.start()
    var firstApplied: UInt64?
    var firstCount = 0
    var status: SyncStatus?
    while true {
        usleep(50_000)
        guard let s = try? c.syncStatus() else { continue }
        status = s
        if firstApplied == nil && s.applied > 0 { (firstApplied, firstCount) = (now() - t0, s.applied) }
        if s.applied >= total { break }
        if now() - t0 > 600_000_000_000 { print("sync: c holds \(s.applied) of \(total) after 10 minutes"); finish(1) }
    }
    let firstSync = Double(now() - t0) / 1e9
    driving.lock.withLock { driving.done = true }
    let steady = firstSync - Double(firstApplied ?? 0) / 1e9
    var held = -1
    if case .list(let items)? = try? c.copyMatching(["class": .string("genp"), "sync": .int(1), "m_Limit": .string("m_LimitAll"),
                                                     "r_Attributes": .bool(true)]) { held = items.count }
    // The status is sampled every 50 ms: a steady rate over less than a second says little.
    let rate = steady >= 1 ? String(format: ", then %.0f/s", Double(total - firstCount) / steady) : ""
    print(String(format: "sync-first  approval -> C holds all %d items  %.1fs  items/s=%.0f  (first records after %.2fs%@; pulled %d, applied %d, rejected %d; C finds %d; load %@)",
                 total, firstSync, Double(total) / firstSync, Double(firstApplied ?? 0) / 1e9, rate,
                 status?.pulled ?? 0, status?.applied ?? 0, status?.rejected ?? 0, held, loadAverage()))
    if let bytes = cluster.databaseBytes(passfile: root("A") + "/pgpass") {
        print(String(format: "sync-db     pg_database_size after %d records: %.1f MB (%.0f bytes a record, the empty database included)",
                     total, Double(bytes) / 1e6, Double(bytes) / Double(total)))
    }
    fflush(nil)
    finish(0)
}
