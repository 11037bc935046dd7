// keychain-bench: throughput and latency of keychaind through KeychainClient, plus the costs
// that bound them (Argon2id, CLI start-up). Run with `make bench` (release build).
// One line per figure; medians and ratios are what to compare on a shared machine.
import Foundation
import KeychainClient
import KeychainModel

struct Options {
    var socket: String?
    var sizes = [1_000, 100_000]
    var clients = [1, 8]
    var skipCLI = false
    var getsPerClient = 20_000
    var backupItems = 10_000
    /// Unlocks for the get-during-unlock figure, which then runs alone; 0: not run.
    var duringUnlock = 0
    /// Items for the long-list memory figure (one m_LimitAll attributes query, as `keychain
    /// list` makes), which then runs alone; 0: not run.
    var listItems = 0
    /// 1 MiB items for the large-answer memory figure (four concurrent m_LimitAll + r_Data
    /// queries), which then runs alone; 0: not run.
    var bigItems = 0
    /// Which figures to run (profiling one operation at a time); all by default.
    var ops: Set<String> = ["status", "add", "get", "update", "delete", "sign", "pkcs11"]
    /// KeychainConnection's busyPollMicroseconds (0: the client sleeps for every answer).
    /// The bench measures latency, so its clients watch for answers (the library's default is
    /// not to): 40 µs, as in docs/performance.md.
    var clientPollMicroseconds = 40
    /// Queries each different from every other, while the daemon's memory is watched (0: none).
    var distinctQueries = 0
    /// Keychain sizes at which to time a Secret Service attribute search (each on a fresh
    /// daemon, which then runs alone); empty: not run.
    var attributeSearchSizes: [Int] = []
    /// Items preloaded in each Secret Service server for the figures beside gnome-keyring, one
    /// run per size, which then run alone; empty: not run.
    var secretServiceItems: [Int] = []
    /// Signatures per key through `keychain ssh-agent` and OpenSSH's ssh-agent, which then run
    /// alone (AgentSignatures.swift); 0: not run.
    var sshAgentSignatures = 0
    /// Add-to-readable samples between two daemons in one sync circle, then a first sync of
    /// `syncItems` onto a third (SyncBench.swift), which then run alone; 0: not run.
    var syncSamples = 0
    var syncItems = 100_000

    init(_ args: [String]) {
        var i = 0
        while i < args.count {
            switch args[i] {
            case "--socket": socket = args[i + 1]; i += 1
            case "--sizes": sizes = args[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--clients": clients = args[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--gets": getsPerClient = Int(args[i + 1]) ?? getsPerClient; i += 1
            case "--skip-cli": skipCLI = true
            case "--backup": backupItems = Int(args[i + 1]) ?? backupItems; i += 1
            case "--during-unlock": duringUnlock = Int(args[i + 1]) ?? duringUnlock; i += 1
            case "--list": listItems = Int(args[i + 1]) ?? listItems; i += 1
            case "--big-items": bigItems = Int(args[i + 1]) ?? bigItems; i += 1
            case "--client-poll-us": clientPollMicroseconds = Int(args[i + 1]) ?? clientPollMicroseconds; i += 1
            case "--ops": ops = Set(args[i + 1].split(separator: ",").map(String.init)); i += 1
            case "--distinct-queries": distinctQueries = Int(args[i + 1]) ?? distinctQueries; i += 1
            case "--attribute-search": attributeSearchSizes = args[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--secret-service": secretServiceItems = args[i + 1].split(separator: ",").compactMap { Int($0) }; i += 1
            case "--ssh-agent": sshAgentSignatures = Int(args[i + 1]) ?? sshAgentSignatures; i += 1
            case "--sync":
                syncSamples = 200
                if i + 1 < args.count, let n = Int(args[i + 1]) { syncSamples = n; i += 1 }
            case "--sync-items": syncItems = Int(args[i + 1]) ?? syncItems; i += 1
            default:
                print("usage: keychain-bench [--list N] [--big-items N] [--socket PATH] [--sizes 1000,100000] [--clients 1,8] [--gets N] [--ops status,add,get,update,delete,sign,pkcs11] [--client-poll-us N] [--skip-cli] [--backup ITEMS (0: none)] [--during-unlock UNLOCKS] [--distinct-queries N (alone)] [--attribute-search 1000,100000 (alone)] [--secret-service 100,1000 (alone)] [--ssh-agent SIGNATURES (alone)] [--sync [SAMPLES] [--sync-items N (0: no first sync)] (alone)]")
                exit(64)
            }
            i += 1
        }
    }
}

func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func percentile(_ sorted: [UInt64], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return 0 }
    return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1000
}

/// One figure: operations, the wall time they took, and each one's latency. Figures of
/// several rounds add up.
struct Figure {
    var operations = 0
    var seconds = 0.0
    var latencies: [UInt64] = []

    mutating func add(_ other: Figure) {
        operations += other.operations
        seconds += other.seconds
        latencies += other.latencies
    }
}

/// Runs `perClient(client, index)` `count` times split over `clients` threads, each with its
/// own connection.
func measure(clients: Int, count: Int, socket: String,
             _ body: @escaping @Sendable (KeychainConnection, Int) throws -> Void) -> Figure {
    final class Collected: @unchecked Sendable {
        let lock = NSLock()
        var latencies: [UInt64] = []
    }
    let collected = Collected()
    let group = DispatchGroup()
    let start = now()
    for c in 0..<clients {
        group.enter()
        let thread = Thread {
            let connection = KeychainConnection(socketPath: socket, busyPollMicroseconds: options.clientPollMicroseconds)
            var mine: [UInt64] = []
            mine.reserveCapacity(count / clients + 1)
            var i = c
            while i < count {
                let t0 = now()
                do { try body(connection, i) } catch { fatalError("operation \(i) failed: \(error)") }
                mine.append(now() - t0)
                i += clients
            }
            collected.lock.lock()
            collected.latencies += mine
            collected.lock.unlock()
            group.leave()
        }
        thread.start()
    }
    group.wait()
    return Figure(operations: count, seconds: Double(now() - start) / 1e9, latencies: collected.latencies)
}

func report(_ op: String, n: Int, c: Int, _ figure: Figure, shown: Bool = true, label: String = "") {
    guard shown else { return }
    let lat = figure.latencies.sorted()
    let name = op.padding(toLength: 6, withPad: " ", startingAt: 0)
    print(name + String(format: " n=%-6d c=%d  ops/s=%8.0f  p50=%7.1fus  p99=%7.1fus",
                        n, c, Double(figure.operations) / figure.seconds, percentile(lat, 0.5), percentile(lat, 0.99))
          + (label.isEmpty ? "" : "  (\(label))"))
    fflush(nil)
}

func item(_ i: Int) -> AttributeDictionary {
    ["class": .string("genp"), "svce": .string("bench"), "acct": .string("account-\(i)")]
}

/// Starts a private keychaind from beside this binary, on a temporary directory; `config`: the
/// text of its config file, if any.
func startDaemon(suffix: String = "", config: String? = nil) -> (Process, String, String) {
    let dir = "/tmp/kcbench.\(getpid())\(suffix)"
    mkdir(dir, 0o700)
    let socket = dir + "/s.sock"
    let p = Process()
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    p.executableURL = URL(fileURLWithPath: (exe as NSString).deletingLastPathComponent + "/keychaind")
    p.arguments = ["--state-dir", dir + "/state", "--socket", socket]
    if let config {
        try! config.write(toFile: dir + "/keychaind.toml", atomically: true, encoding: .utf8)
        p.arguments! += ["--config", dir + "/keychaind.toml"]
    }
    // The figures with Argon2id in them are for the real cost, never the tests' one.
    p.environment = ProcessInfo.processInfo.environment.filter { $0.key != "KEYCHAIND_INSECURE_FAST_KDF" }
    p.standardError = FileHandle.nullDevice
    try! p.run()
    for _ in 0..<500 {
        if (try? KeychainConnection(socketPath: socket).status()) != nil { break }
        usleep(10_000)
    }
    return (p, socket, dir)
}

/// Median wall time of running a command `runs` times, in milliseconds. posix_spawn directly:
/// Foundation's Process adds tens of milliseconds of its own per launch on Linux.
/// A command spawned with posix_spawn (stdout and stderr to /dev/null) and timed as a whole
/// process, from spawn to exit.
final class TimedCommand {
    private let path: String
    private let argv: [UnsafeMutablePointer<CChar>?]
    private let envp: [UnsafeMutablePointer<CChar>?]
    private var actions = posix_spawn_file_actions_t()

    init?(_ path: String, _ args: [String], env: [String: String] = [:]) {
        guard FileManager.default.isExecutableFile(atPath: path) else { return nil }
        self.path = path
        argv = ([path] + args).map { strdup($0) } + [nil]
        envp = ProcessInfo.processInfo.environment.merging(env) { $1 }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        posix_spawn_file_actions_init(&actions)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    }

    deinit {
        argv.forEach { free($0) }
        envp.forEach { free($0) }
        posix_spawn_file_actions_destroy(&actions)
    }

    /// Nanoseconds from spawn to exit; nil if it could not be spawned or failed.
    func run() -> UInt64? {
        var pid: pid_t = 0
        let t0 = now()
        guard posix_spawn(&pid, path, &actions, nil, argv, envp) == 0 else { return nil }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return status == 0 ? now() - t0 : nil
    }
}

/// Median wall times of `commands`, run in turn `runs` times each, so that the machine's noise
/// falls on all of them alike.
func interleavedMedians(_ commands: [TimedCommand], runs: Int = 200) -> [Double]? {
    var times = Array(repeating: [UInt64](), count: commands.count)
    for _ in 0..<runs {
        for (i, command) in commands.enumerated() {
            guard let t = command.run() else { return nil }
            times[i].append(t)
        }
    }
    return times.map { Double($0.sorted()[$0.count / 2]) / 1e6 }
}

let options = Options(Array(CommandLine.arguments.dropFirst()))
if !options.secretServiceItems.isEmpty {
    for items in options.secretServiceItems { secretServiceBench(items: items) }
    exit(0)
}
if options.syncSamples > 0 {
    syncBench(samples: options.syncSamples, bulk: options.syncItems)
}
var daemon: (Process, String, String)?
let socket: String
if let s = options.socket {
    socket = s
} else {
    daemon = startDaemon()
    socket = daemon!.1
}
let setup = KeychainConnection(socketPath: socket)
print("keychain-bench: socket \(socket), \(ProcessInfo.processInfo.activeProcessorCount) cores")

/// The machine's own floor, measured now: a 64-byte ping-pong over a socketpair between two
/// threads, with no keychain code in the loop. The issue's yardstick ("a bare Unix-socket
/// round trip takes about 15 microseconds"); on a noisy machine it moves with everything else.
func bareRoundTrip(count: Int = 20_000) -> Figure {
    var fds: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { return Figure() }
    let echo = fds[1]
    let thread = Thread {
        var buffer = [UInt8](repeating: 0, count: 64)
        while true {
            let n = recv(echo, &buffer, 64, 0)
            if n <= 0 { break }
            _ = send(echo, buffer, n, 0)
        }
    }
    thread.start()
    var buffer = [UInt8](repeating: 0, count: 64)
    var latencies: [UInt64] = []
    latencies.reserveCapacity(count)
    let start = now()
    for _ in 0..<count {
        let t0 = now()
        _ = send(fds[0], buffer, 64, 0)
        var got = 0
        while got < 64 {
            let n = buffer.withUnsafeMutableBytes { recv(fds[0], $0.baseAddress! + got, 64 - got, 0) }
            if n <= 0 { break }
            got += n
        }
        latencies.append(now() - t0)
    }
    let seconds = Double(now() - start) / 1e9
    close(fds[0])
    close(fds[1])
    return Figure(operations: count, seconds: seconds, latencies: latencies)
}
let bare = bareRoundTrip()
report("bare", n: 0, c: 1, bare)

/// Gets of an Always item by one client while another locks and unlocks `unlocks` times, at
/// the daemon's Argon2id cost (issue: "a get issued during an unlock completes in under 5 ms
/// p99"); first the same gets with nothing else running, for comparison.
func getsDuringUnlocks(_ unlocks: Int, socket: String) {
    let passcode = Array("bench passcode".utf8)
    let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("during-unlock"), "acct": .string("dk"),
                                      "r_Data": .bool(true)]
    try! setup.add(query.filter { $0.key != "r_Data" }.merging(["pdmn": .string("dk"), "v_Data": .data([1])]) { $1 })
    try! setup.setPasscode(passcode)
    try! setup.lock()
    let alone = measure(clients: 1, count: options.getsPerClient, socket: socket) { conn, _ in
        _ = try conn.copyMatching(query)
    }
    printGets("get-alone        ", alone.latencies, seconds: alone.seconds)
    final class Shared: @unchecked Sendable {
        let lock = NSLock()
        var running = true
        var unlockTimes: [UInt64] = []
    }
    let shared = Shared()
    let unlocker = Thread {
        let connection = KeychainConnection(socketPath: socket)
        var times: [UInt64] = []
        for _ in 0..<unlocks {
            let t0 = now()
            do { try connection.unlock(passcode: passcode) } catch { fatalError("unlock failed: \(error)") }
            times.append(now() - t0)
            do { try connection.lock() } catch { fatalError("lock failed: \(error)") }
        }
        shared.lock.lock()
        shared.running = false
        shared.unlockTimes = times
        shared.lock.unlock()
    }
    let reader = KeychainConnection(socketPath: socket, busyPollMicroseconds: options.clientPollMicroseconds)
    _ = try! reader.copyMatching(query)  // connected before the unlocks start
    unlocker.start()
    var latencies: [UInt64] = []
    let start = now()
    while shared.lock.withLock({ shared.running }) {
        let t0 = now()
        do { _ = try reader.copyMatching(query) } catch { fatalError("get failed: \(error)") }
        latencies.append(now() - t0)
    }
    let seconds = Double(now() - start) / 1e9
    let unlockTimes = shared.lock.withLock { shared.unlockTimes.sorted() }
    printGets("get-during-unlock", latencies, seconds: seconds,
              String(format: "  unlocks=%d  unlock_p50=%.0fms", unlockTimes.count, percentile(unlockTimes, 0.5) / 1000))
}

func printGets(_ name: String, _ latencies: [UInt64], seconds: Double, _ suffix: String = "") {
    let lat = latencies.sorted()
    print(name + String(format: " c=1  gets=%-7d ops/s=%8.0f  p50=%7.1fus  p99=%7.1fus  max=%8.1fus",
                        lat.count, Double(lat.count) / seconds, percentile(lat, 0.5), percentile(lat, 0.99),
                        Double(lat.last ?? 0) / 1000) + suffix)
    fflush(nil)
}

/// The daemon's anonymous memory (RssAnon: its own, not the file pages SQLite maps), sampled
/// every few milliseconds from another thread while a figure runs.
final class AnonymousMemory: @unchecked Sendable {
    private let pid: Int32
    private let lock = NSLock()
    private var peakKiB = 0
    private var running = true
    private let done = DispatchSemaphore(value: 0)

    init(pid: Int32) {
        self.pid = pid
        Thread { [self] in
            while lock.withLock({ running }) {
                let now = Self.read(pid)
                lock.withLock { peakKiB = max(peakKiB, now) }
                usleep(5_000)
            }
            done.signal()
        }.start()
    }

    static func read(_ pid: Int32) -> Int { Int((rssAnonMB(of: pid) ?? 0) * 1024) }

    /// Stops sampling; the peak in MiB.
    func stop() -> Double {
        lock.withLock { running = false }
        done.wait()
        return Double(lock.withLock { peakKiB }) / 1024
    }
}

/// Adds `count` items made by `make` from 8 clients at once.
func fill(_ count: Int, socket: String, _ make: @escaping @Sendable (Int) -> AttributeDictionary) {
    let group = DispatchGroup()
    for client in 0..<8 {
        group.enter()
        Thread {
            let c = KeychainConnection(socketPath: socket)
            for i in stride(from: client, to: count, by: 8) { _ = try? c.add(make(i)) }
            group.leave()
        }.start()
    }
    group.wait()
}

/// `--list N` and `--big-items N`: the daemon's memory while it answers one long list, and
/// four concurrent answers carrying 1 MiB secrets (docs/performance.md, "Long answers").
func longAnswers(socket: String, pid: Int32) {
    if options.listItems > 0 {
        fill(options.listItems, socket: socket) { i in
            ["class": .string("genp"), "svce": .string("list"), "acct": .string("account-\(i)"),
             "labl": .string("label of item \(i)"), "v_Data": .data(Array("secret-\(i)".utf8))]
        }
        let start = Double(AnonymousMemory.read(pid)) / 1024
        let memory = AnonymousMemory(pid: pid)
        let t0 = now()
        let c = KeychainConnection(socketPath: socket)
        let count: Int
        if case .list(let items)? = try? c.copyMatching(["class": .string("genp"), "m_Limit": .string("m_LimitAll"),
                                                         "r_Attributes": .bool(true)]) {
            count = items.count
        } else {
            count = -1
        }
        let ms = Double(now() - t0) / 1e6
        print(String(format: "list   n=%-7d listed=%d  time=%.0fms  rss_anon_start=%.1fMB  rss_anon_peak=%.1fMB  (target < 128 MB)",
                     options.listItems, count, ms, start, memory.stop()))
    }
    if options.bigItems > 0 {
        fill(options.bigItems, socket: socket) { i in
            ["class": .string("genp"), "svce": .string("big"), "acct": .string("big-\(i)"),
             "v_Data": .data([UInt8](repeating: UInt8(truncatingIfNeeded: i), count: 1 << 20))]
        }
        let start = Double(AnonymousMemory.read(pid)) / 1024
        let memory = AnonymousMemory(pid: pid)
        let t0 = now()
        let answered = Locked(0)
        let group = DispatchGroup()
        for _ in 0..<4 {
            group.enter()
            Thread {
                let c = KeychainConnection(socketPath: socket)
                if case .list(let items)? = try? c.copyMatching(["class": .string("genp"), "svce": .string("big"),
                                                                 "m_Limit": .string("m_LimitAll"), "r_Data": .bool(true)]) {
                    answered.withLock { $0 += items.count }
                }
                group.leave()
            }.start()
        }
        group.wait()
        let ms = Double(now() - t0) / 1e6
        print(String(format: "big    n=%-7d c=4  returned=%d  time=%.0fms  rss_anon_start=%.1fMB  rss_anon_peak=%.1fMB  (target < 256 MB)",
                     options.bigItems, answered.withLock { $0 }, ms, start, memory.stop()))
    }
}

final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&value) } }
}

if options.listItems > 0 || options.bigItems > 0 {
    guard let (p, _, dir) = daemon else {
        print("--list and --big-items measure the bench's own keychaind (no --socket)")
        exit(64)
    }
    longAnswers(socket: socket, pid: p.processIdentifier)
    p.terminate()
    p.waitUntilExit()
    try? FileManager.default.removeItem(atPath: dir)
    exit(0)
}

if options.duringUnlock > 0 {
    guard options.socket == nil else {
        print("--during-unlock sets a passcode: it runs against the bench's own keychaind only (no --socket)")
        exit(64)
    }
    getsDuringUnlocks(options.duringUnlock, socket: socket)
    if let (p, _, dir) = daemon {
        p.terminate()
        p.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
    exit(0)
}

/// The daemon's anonymous memory (RssAnon: its heap, not the mapped database), in MB.
func rssAnonMB(of pid: Int32) -> Double? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("RssAnon:") }),
          let kB = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap({ Double($0) })
    else { return nil }
    return kB / 1024
}

/// `count` lookups, no two alike: each has its own m_Limit, and they cycle through every set of
/// hashed attributes a class has (1,544 sets over the four classes). A daemon that keeps a
/// statement per distinct query grows with each; RssAnon is sampled every 1,000 queries.
func distinctQueries(count: Int, socket: String, daemon pid: Int32) {
    let connection = KeychainConnection(socketPath: socket, busyPollMicroseconds: options.clientPollMicroseconds)
    for i in 0..<100 {
        var d = item(i)
        d["v_Data"] = .data(Array("secret-value-\(i)".utf8))
        _ = try? connection.add(d)
    }
    let classes = ItemClass.stored.map { ($0, ClassSchema.of($0)!.columnAttributes) }
    func query(_ i: Int) -> AttributeDictionary {
        let (cls, specs) = classes[i % classes.count]
        let subset = (i / classes.count) % (1 << specs.count)
        var q: AttributeDictionary = ["class": .string(cls.rawValue), "m_Limit": .int(Int64(i + 1)), "r_Data": .bool(true)]
        for (bit, spec) in specs.enumerated() where subset & (1 << bit) != 0 { q[spec.code] = spec.defaultValue }
        if cls == .genericPassword && subset == 0 { q["svce"] = .string("bench") }  // some find items
        return q
    }
    // The start: the daemon once its first queries have prepared its fixed statements.
    for i in 0..<(4 * classes.count) { _ = try? connection.copyMatching(query(i)) }
    guard let start = rssAnonMB(of: pid) else { print("distinct-queries cannot read /proc/\(pid)/status"); return }
    var peak = start
    let t0 = now()
    for i in 0..<count {
        do throws(KeychainError) {
            _ = try connection.copyMatching(query(i))
        } catch where error.status == .itemNotFound {
        } catch {
            fatalError("distinct query \(i) failed: \(error)")
        }
        if i % 1_000 == 999, let sample = rssAnonMB(of: pid) { peak = max(peak, sample) }
    }
    let seconds = Double(now() - t0) / 1e9
    let end = rssAnonMB(of: pid) ?? .nan
    peak = max(peak, end)
    print(String(format: "distinct-queries n=%d rss_anon_start=%.1fMB rss_anon_peak=%.1fMB rss_anon_end=%.1fMB growth=%.1fMB queries/s=%.0f",
                 count, start, peak, end, end - start, Double(count) / seconds))
    fflush(nil)
}

/// `--attribute-search 1000,100000`: a Secret Service lookup (op 17, through asCaller as the
/// bridge sends it: a common xdg:schema pair and a rare user pair) at each keychain size, each
/// on a fresh daemon that takes this bench as its bridge; then the ratio of the largest size's
/// median to the smallest's (design: within 2×, docs/performance.md).
func attributeSearches(sizes: [Int]) {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8), let close = stat.lastIndex(of: ")"),
          let startTime = UInt64(stat[stat.index(after: close)...].split(separator: " ")[19]) else {
        print("attribute-search cannot read /proc/self/stat")
        return
    }
    let me = CallerIdentity(pid: getpid(), startTime: startTime)
    @Sendable func item(_ i: Int) -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("secret-service:login"), "pdmn": .string("ck"),
         "labl": .string("bench \(i)"), "v_Data": .data(Array("secret-\(i)".utf8)),
         "xsat": .data(try! SecretServiceAttributes(["xdg:schema": "org.example.Bench", "user": "user-\(i)"]).encoded)]
    }
    var medians: [Double] = []
    for n in sizes {
        let (p, socket, dir) = startDaemon(suffix: "ss\(n)", config: "bridge_executables = [\"\(exe)\"]\n")
        let group = DispatchGroup()
        for client in 0..<8 {
            group.enter()
            Thread {
                let bridge = KeychainConnection(socketPath: socket).onBehalf(of: me)
                for i in stride(from: client, to: n, by: 8) { _ = try! bridge.attributeAdd(item(i), replace: false) }
                group.leave()
            }.start()
        }
        group.wait()
        let lookups = 5_000
        if n == sizes.first {
            // What asCaller itself costs: a status call for this process, beside a plain one.
            report("status", n: 0, c: 1, measure(clients: 1, count: lookups, socket: socket) { connection, _ in _ = try connection.status() })
            report("status", n: 0, c: 1, measure(clients: 1, count: lookups, socket: socket) { connection, _ in
                _ = try connection.onBehalf(of: me).status()
            }, label: "asCaller status")
        }
        let figure = measure(clients: 1, count: lookups, socket: socket) { connection, i in
            let pairs = try SecretServiceAttributes(["xdg:schema": "org.example.Bench", "user": "user-\((i &* 7919) % n)"])
            let rows = try connection.onBehalf(of: me).attributeSearch(collection: "login", exact: false, pairs: pairs)
            guard rows.count == 1 else { fatalError("attribute search found \(rows.count) items") }
        }
        let sorted = figure.latencies.sorted()
        medians.append(percentile(sorted, 0.5))
        print(String(format: "ss-search n=%-6d c=1  ops/s=%8.0f  p50=%7.1fus  p99=%7.1fus",
                     n, Double(figure.operations) / figure.seconds, percentile(sorted, 0.5), percentile(sorted, 0.99)))
        fflush(nil)
        p.terminate()
        p.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
    if medians.count > 1, let first = medians.first, let last = medians.last {
        print(String(format: "ss-search p50 ratio n=%d / n=%d: %.2f", sizes.last!, sizes.first!, last / first))
    }
}

if !options.attributeSearchSizes.isEmpty {
    if let (p, _, dir) = daemon {
        p.terminate()
        p.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
    attributeSearches(sizes: options.attributeSearchSizes)
    exit(0)
}

// Alone: agent signatures against OpenSSH's agent, in the same run.
if options.sshAgentSignatures > 0 {
    sshAgentFigures(signatures: options.sshAgentSignatures, socket: socket)
    if let (p, _, dir) = daemon {
        p.terminate()
        p.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }
    exit(0)
}

// Alone: the daemon's memory must start from its own baseline, not from earlier figures'.
if options.distinctQueries > 0 {
    if let (p, _, dir) = daemon {
        distinctQueries(count: options.distinctQueries, socket: socket, daemon: p.processIdentifier)
        p.terminate()
        p.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    } else {
        print("distinct-queries needs the bench's own daemon (no --socket): it reads the daemon's /proc/PID/status")
    }
    exit(0)
}

// The floor every call pays: a status call, one socket round trip and no store work.
for c in options.clients where options.ops.contains("status") {
    report("status", n: 0, c: c, measure(clients: c, count: options.getsPerClient * c, socket: socket) { conn, _ in
        _ = try conn.status()
    })
}

// Signatures made inside the daemon (docs/keys.md) through KeychainKey, one call each: an
// Ed25519 and a P-256 key, a 64-byte message (what an SSH signature covers is of that order).
if options.ops.contains("sign") {
    let message = [UInt8](repeating: 0x5a, count: 64)
    for (type, algorithm) in [(KeyType.ed25519, KeySigningAlgorithm.ed25519), (.p256, .ecdsaMessageX962SHA256)] {
        let label = "bench-sign-\(type.rawValue)"
        for old in (try? KeychainKey.find(label: label, connection: setup)) ?? [] { try? old.delete() }
        let key = try! KeychainKey.generate(type, label: label, connection: setup)
        var rates: [Int: Double] = [:]
        // 1 and 8 always: the ratio of their rates says whether signers use more than one core.
        for c in Set(options.clients + [1, 8]).sorted() {
            let figure = measure(clients: c, count: max(1_000, options.getsPerClient * c / 4), socket: socket) { conn, _ in
                _ = try key.using(conn).sign(message, algorithm: algorithm)
            }
            let lat = figure.latencies.sorted()
            rates[c] = Double(figure.operations) / figure.seconds
            print("sign   \(type.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)) c=\(c)  "
                  + String(format: "ops/s=%8.0f  median=%7.1fus  p99=%7.1fus",
                           rates[c]!, percentile(lat, 0.5), percentile(lat, 0.99)))
            fflush(nil)
        }
        print("sign   \(type.rawValue.padding(toLength: 8, withPad: " ", startingAt: 0)) 8 clients / 1: "
              + String(format: "%.2fx the rate (issue 30: at least 1.7x on 2 cores)", rates[8]! / rates[1]!))
        try? key.delete()
    }
}

// The same signatures through the PKCS#11 module, beside SoftHSM2's (PKCS11Signatures.swift).
if options.ops.contains("pkcs11") {
    pkcs11Figures(socket: socket, signatures: max(1_000, options.getsPerClient / 4))
}

// A small keychain's writes are over in a fraction of a second, too short to average out the
// machine's noise (one slow fsync moves the figure): they run in rounds until each figure
// covers at least `minimumWrites` operations. Every round starts from an empty keychain.
let minimumWrites = 10_000
/// Each size's and client count's get figure, for the floors at the end.
var getFigures: [String: Figure] = [:]
for n in options.sizes {
    for c in options.clients {
        var adds = Figure(), gets = Figure(), updates = Figure(), deletes = Figure()
        for round in 0..<max(1, minimumWrites / n) {
            try? setup.delete(["class": .string("genp"), "svce": .string("bench")])
            adds.add(measure(clients: c, count: n, socket: socket) { conn, i in
                var d = item(i)
                d["v_Data"] = .data(Array("secret-value-\(i)".utf8))
                try conn.add(d)
            })
            if round == 0 && options.ops.contains("get") {
                gets = measure(clients: c, count: max(n, options.getsPerClient * c), socket: socket) { conn, i in
                    var q = item((i &* 7919) % n)
                    q["r_Data"] = .bool(true)
                    guard case .single(.data) = try conn.copyMatching(q) else { fatalError("get returned no data") }
                }
            }
            if options.ops.contains("update") {
                updates.add(measure(clients: c, count: min(n, 20_000), socket: socket) { conn, i in
                    try conn.update(item(i), ["v_Data": .data(Array("changed-\(i)".utf8))])
                })
            }
            if options.ops.contains("delete") {
                deletes.add(measure(clients: c, count: n, socket: socket) { conn, i in
                    try conn.delete(item(i))
                })
            }
        }
        report("add", n: n, c: c, adds, shown: options.ops.contains("add"))
        report("get", n: n, c: c, gets, shown: options.ops.contains("get"))
        if options.ops.contains("get") { getFigures["\(n)/\(c)"] = gets }
        report("update", n: n, c: c, updates, shown: options.ops.contains("update"))
        report("delete", n: n, c: c, deletes, shown: options.ops.contains("delete"))
    }
}

/// `keychain get`'s and `keyctl pipe`'s medians (ms) as whole processes, and `keychain
/// --version`'s (the executable's own start), for issue 24's floor; nil when not measured.
var cliMedians: (get: Double, keyctl: Double, version: Double, by: String)?
if !options.skipCLI {
    try? setup.add(["class": .string("genp"), "svce": .string("cli"), "acct": .string("a"), "v_Data": .data(Array("x".utf8))])
    let dir = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0] as String)
    let cli = (dir as NSString).deletingLastPathComponent + "/keychain"
    cliMedians = cliFigures(cli: cli, socket: socket)
    if let m = cliMedians {
        print(String(format: "cli    keychain --version (whole process) median=%.3fms", m.version) + "  (\(m.by))")
        print(String(format: "cli    keychain get (whole process)       median=%.3fms", m.get))
        print(String(format: "cli    keyctl pipe (whole process)        median=%.3fms  ratio=%.2f", m.keyctl, m.get / m.keyctl))
    } else {
        print("cli    keyctl not installed (apt-get install keyutils) — no yardstick")
    }
    fflush(nil)
}

// Backup and restore of many items: the whole call, Argon2id at the daemon's cost included.
if options.backupItems > 0 && options.socket == nil {
    try? setup.delete(["class": .string("genp"), "svce": .string("bench")])
    _ = measure(clients: 8, count: options.backupItems, socket: socket) { conn, i in
        var d = item(i)
        d["pdmn"] = .string("dk")
        d["v_Data"] = .data(Array("secret-value-\(i)".utf8))
        try conn.add(d)
    }
    let password = Array("bench backup password".utf8)
    var t0 = now()
    let (file, info) = try! setup.backup(password: password)
    let backupMs = Double(now() - t0) / 1e6
    let items: Int64 = { if case .int(let n)? = info["items"] { return n } else { return -1 } }()
    print(String(format: "backup  items=%lld  file=%d bytes  time=%.0fms", items, file.count, backupMs))
    let (other, otherSocket, otherDir) = startDaemon(suffix: "restore")
    t0 = now()
    let summary = try! KeychainConnection(socketPath: otherSocket).restore(file, password: password)
    let restoreMs = Double(now() - t0) / 1e6
    let restored: Int64 = { if case .int(let n)? = summary["restored"] { return n } else { return -1 } }()
    print(String(format: "restore items=%lld  time=%.0fms", restored, restoreMs))
    other.terminate()
    other.waitUntilExit()
    try? FileManager.default.removeItem(atPath: otherDir)
}

printFloors(bare: bare, gets: getFigures, cli: cliMedians)

if let (p, _, dir) = daemon {
    p.terminate()
    p.waitUntilExit()
    try? FileManager.default.removeItem(atPath: dir)
}
