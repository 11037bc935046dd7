#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel
import Logging
import Synchronization
import Testing
@testable import KeychainServer

/// The lifecycle driven by scripted events: every "signal arrives" is a value in a list, so
/// nothing here waits on a clock.
@Suite("The daemon's lifecycle")
struct DaemonLifecycleTests {
    /// What happened, to the service and the observers, in one order.
    final class Journal: Sendable {
        let entries = Mutex<[String]>([])
        func add(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    final class RecordingService: LifecycleService {
        let journal: Journal
        var reloadFails = false
        init(_ journal: Journal) { self.journal = journal }
        func startServing() { journal.add("start") }
        func reload(_ config: DaemonConfig, source: String) throws(KeychainError) {
            if reloadFails { throw KeychainError(.io, "cannot open the audit log") }
            journal.add("reload \(source) log_level=\(config.logLevel)")
        }
        func lock(reason: String) { journal.add("lock: \(reason)") }
        func shutdown() { journal.add("shutdown") }
        func waitUntilStopped() { journal.add("stopped") }
    }

    struct RecordingObserver: ReadinessObserver {
        let journal: Journal
        func announce(_ phase: ServicePhase) { journal.add("announce \(phase)") }
    }

    /// A service whose in-flight calls never finish (until the test lets them).
    final class WedgedService: LifecycleService, @unchecked Sendable {
        let released = DispatchSemaphore(value: 0)
        func startServing() {}
        func reload(_ config: DaemonConfig, source: String) throws(KeychainError) {}
        func lock(reason: String) {}
        func shutdown() {}
        func waitUntilStopped() { released.wait() }
    }

    /// Every log line, kept for the test to read.
    struct JournalLogHandler: LogHandler {
        let journal: Journal
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
                 file: String, function: String, line: UInt) {
            journal.add("\(level): \(message)")
        }
    }

    /// Events from a list; after the last one, none (as if the source had closed).
    struct ScriptedEvents: LifecycleEvents {
        var remaining: [LifecycleEvent]
        var taken = 0
        mutating func next() -> LifecycleEvent? {
            guard !remaining.isEmpty else { return nil }
            taken += 1
            return remaining.removeFirst()
        }
    }

    /// Runs a lifecycle over `events`; returns the journal and how many events it took.
    func run(_ events: [LifecycleEvent], configFile: ConfigFile = ConfigFile(path: "/etc/k.toml", required: true),
             reloadFails: Bool = false,
             load: @escaping (String) throws -> DaemonConfig = { _ in try DaemonConfig.parse("log_level = \"debug\"\n") })
        -> (journal: [String], taken: Int) {
        var script = ScriptedEvents(remaining: events)
        let journal = run(&script, configFile: configFile, reloadFails: reloadFails, load: load)
        return (journal, script.taken)
    }

    func run(_ events: inout some LifecycleEvents, configFile: ConfigFile, reloadFails: Bool = false,
             load: @escaping (String) throws -> DaemonConfig) -> [String] {
        let journal = Journal()
        let service = RecordingService(journal)
        service.reloadFails = reloadFails
        let lifecycle = DaemonLifecycle(configFile: configFile, loadConfig: load,
                                        observers: [RecordingObserver(journal: journal)], logger: Logger(label: "test"))
        lifecycle.run(service, events: &events)
        return journal.all
    }

    @Test func readyIsAnnouncedOnceServingHasStartedAndBeforeAnyEvent() {
        let (journal, _) = run([.stop(signal: SIGTERM)])
        #expect(Array(journal.prefix(2)) == ["start", "announce ready"])
    }

    @Test func aStopAnnouncesStoppingThenShutsDownAndWaitsForTheServiceToStop() {
        let (journal, _) = run([.stop(signal: SIGINT)])
        #expect(journal == ["start", "announce ready", "announce stopping", "shutdown", "stopped"])
    }

    @Test func aStopGivesUpWaitingAtItsDeadlineAndSaysSoInTheLog() {
        let journal = Journal()
        let service = WedgedService()
        defer { service.released.signal() }
        var script = ScriptedEvents(remaining: [.stop(signal: SIGTERM)])
        let lifecycle = DaemonLifecycle(configFile: ConfigFile(path: "/nonexistent/keychaind.toml", required: false), loadConfig: { _ in try DaemonConfig.parse("") }, observers: [],
                                        logger: Logger(label: "test") { _ in JournalLogHandler(journal: journal) },
                                        stopDeadlineSeconds: 0.2)
        lifecycle.run(service, events: &script)  // returns although the service never stops
        #expect(journal.all.contains { $0.hasPrefix("error: stop: in-flight calls had not finished after 0.2 s") }, "\(journal.all)")
    }

    @Test func aStopThatFinishesInTimeLogsNoDeadline() {
        let journal = Journal()
        var script = ScriptedEvents(remaining: [.stop(signal: SIGTERM)])
        let lifecycle = DaemonLifecycle(configFile: ConfigFile(path: "/nonexistent/keychaind.toml", required: false), loadConfig: { _ in try DaemonConfig.parse("") }, observers: [],
                                        logger: Logger(label: "test") { _ in JournalLogHandler(journal: journal) })
        lifecycle.run(RecordingService(journal), events: &script)
        #expect(journal.all.last == "stopped")
        #expect(!journal.all.contains { $0.contains("had not finished") })
    }

    @Test func eventsAfterAStopAreLeftUntaken() {
        let (journal, taken) = run([.stop(signal: SIGTERM), .reload, .lock])
        #expect(taken == 1)
        #expect(journal.last == "stopped")
    }

    @Test func aReloadReadsTheConfigFileAgainBetweenReloadingAndReady() {
        let (journal, _) = run([.reload, .stop(signal: SIGTERM)])
        #expect(journal == ["start", "announce ready",
                            "announce reloading", "reload /etc/k.toml log_level=debug", "announce ready",
                            "announce stopping", "shutdown", "stopped"])
    }

    @Test func aConfigFileThatNoLongerParsesKeepsTheDaemonServingAndReady() {
        let (journal, _) = run([.reload, .stop(signal: SIGTERM)], load: { _ in throw KeychainError(.param, "line 3: no") })
        #expect(journal == ["start", "announce ready", "announce reloading", "announce ready",
                            "announce stopping", "shutdown", "stopped"])
    }

    @Test func aReloadTheServiceRefusesKeepsServingAndReady() {
        let (journal, _) = run([.reload, .reload, .stop(signal: SIGTERM)], reloadFails: true)
        #expect(journal.filter { $0 == "announce ready" }.count == 3)
        #expect(!journal.contains { $0.hasPrefix("reload ") })
        #expect(journal.last == "stopped")
    }

    @Test func withoutAConfigFileAReloadReadsNothingYetAnnouncesReloadingThenReady() {
        let absent = ConfigFile(path: "/nonexistent-\(getpid())/keychaind.toml", required: false)
        let (journal, _) = run([.reload, .stop(signal: SIGTERM)], configFile: absent)
        #expect(journal == ["start", "announce ready", "announce reloading", "announce ready",
                            "announce stopping", "shutdown", "stopped"])
    }

    /// Writes the default config file when the second reload is taken, as an operator who
    /// started keychaind without one and wrote it later.
    struct WritesTheFileBeforeTheSecondReload: LifecycleEvents {
        let path: String
        var remaining: [LifecycleEvent] = [.reload, .reload, .stop(signal: SIGTERM)]
        mutating func next() -> LifecycleEvent? {
            if remaining.count == 2 { _ = FileManager.default.createFile(atPath: path, contents: Data("log_level = \"debug\"\n".utf8)) }
            return remaining.isEmpty ? nil : remaining.removeFirst()
        }
    }

    @Test func aDefaultConfigFileWrittenAfterTheStartIsReadOnTheNextReload() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("lifecycle-\(UUID())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var events = WritesTheFileBeforeTheSecondReload(path: dir + "/keychaind.toml")
        let journal = run(&events, configFile: ConfigFile(path: dir + "/keychaind.toml", required: false),
                          load: { path in try DaemonConfig.load(path: path) })
        #expect(journal == ["start", "announce ready",
                            "announce reloading", "announce ready",
                            "announce reloading", "reload \(dir)/keychaind.toml log_level=debug", "announce ready",
                            "announce stopping", "shutdown", "stopped"])
    }

    @Test func aLockEventLocksTheServiceAndKeepsItServing() {
        let (journal, _) = run([.lock, .lock, .stop(signal: SIGTERM)])
        #expect(journal == ["start", "announce ready", "lock: SIGUSR1 from the host", "lock: SIGUSR1 from the host",
                            "announce stopping", "shutdown", "stopped"])
    }

    @Test func theEndOfTheEventsStopsTheServiceCleanly() {
        let (journal, _) = run([.lock])
        #expect(Array(journal.suffix(3)) == ["announce stopping", "shutdown", "stopped"])
    }

    /// The real source: a signal raised in this thread after SignalEvents blocked it stays
    /// pending until next() takes it, so the test needs no timing.
    @Test(arguments: [(SIGHUP, LifecycleEvent.reload), (SIGUSR1, .lock), (SIGTERM, .stop(signal: SIGTERM)), (SIGINT, .stop(signal: SIGINT))])
    func eachSignalBecomesItsEvent(signal: Int32, event: LifecycleEvent) {
        var previous = sigset_t()
        pthread_sigmask(SIG_SETMASK, nil, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        var events = SignalEvents()
        raise(signal)  // to this thread, where it is blocked: it waits, pending
        #expect(events.next() == event)
    }
}

/// sd_notify, against a datagram socket the test listens on.
@Suite("Service notification")
struct ServiceNotificationTests {
    /// A bound datagram socket; `receive` returns what one datagram carried.
    struct Listener {
        let fd: Int32
        init(address: [UInt8], length: Int) throws {
            fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: address) }
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + length))
                }
            }
            guard rc == 0 else { throw SystemCallError.current("bind") }
        }
        /// Non-blocking: the datagram was queued before send returned, or it never will be.
        func receive() -> String? {
            var buffer = [UInt8](repeating: 0, count: 512)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            return n < 0 ? nil : String(decoding: buffer.prefix(n), as: UTF8.self)
        }
    }

    @Test func eachPhaseIsOneDatagramToTheSocketPath() throws {
        let path = "/tmp/kcn.\(getpid()).\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(path) }
        let listener = try Listener(address: Array(path.utf8), length: path.utf8.count + 1)
        defer { close(listener.fd) }
        let notification = try #require(ServiceNotification(environment: ["NOTIFY_SOCKET": path]))
        notification.announce(.ready)
        notification.announce(.reloading)
        notification.announce(.stopping)
        #expect(listener.receive()?.split(separator: "\n").first == "READY=1")
        let reloading = try #require(listener.receive()).split(separator: "\n")
        #expect(reloading.first == "RELOADING=1")
        #expect(reloading.contains { $0.hasPrefix("MONOTONIC_USEC=") && UInt64($0.dropFirst(15)) != nil })
        #expect(listener.receive()?.split(separator: "\n").first == "STOPPING=1")
        #expect(listener.receive() == nil)
    }

    @Test func anAbstractNameStartsWithAnAtSign() throws {
        let name = "kcn-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let listener = try Listener(address: [0] + Array(name.utf8), length: 1 + name.utf8.count)
        defer { close(listener.fd) }
        try #require(ServiceNotification(environment: ["NOTIFY_SOCKET": "@" + name])).send("READY=1")
        #expect(listener.receive() == "READY=1")
    }

    @Test func withoutNotifySocketThereIsNoNotification() {
        #expect(ServiceNotification(environment: [:]) == nil)
        #expect(ServiceNotification(environment: ["NOTIFY_SOCKET": "relative/path"]) == nil)
    }

    @Test func aManagerThatIsGoneDoesNotStopTheDaemon() throws {
        let notification = try #require(ServiceNotification(environment: ["NOTIFY_SOCKET": "/tmp/kcn-nobody-\(getpid())"]))
        #expect(throws: SystemCallError.self) { try notification.send("READY=1") }
        notification.announce(.ready)  // best effort: returns
    }
}
