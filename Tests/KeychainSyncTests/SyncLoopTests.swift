import Foundation
import KeychainCrypto
import KeychainModel
import KeychainSync
import Testing

/// The sync thread (docs/sync.md 7.2) against a real server: when it runs its pass, and how it
/// rides out a server that goes away and comes back.
@Suite("SyncLoop: the sync thread's passes, reconnects and stop")
struct SyncLoopTests {
    typealias F = RecordStoreFixture

    /// What the loop's passes did, for the test to watch.
    final class PassLog: Sendable {
        private let starts = Shared<[ContinuousClock.Instant]>([])
        private let ends = Shared<[ContinuousClock.Instant]>([])
        var count: Int { starts.current.count }
        var startTimes: [ContinuousClock.Instant] { starts.current }
        func started() { starts.update { $0.append(.now) } }
        /// For passes that say when they end (one at a time, so the n-th end is the n-th pass's).
        func finished() { ends.update { $0.append(.now) } }

        /// Whether a pass started after `instant` and has ended.
        func passRan(after instant: ContinuousClock.Instant) -> Bool {
            let ended = ends.current
            return zip(startTimes, ended).contains { start, _ in start > instant }
        }
    }

    /// A fast loop for tests: retries after 100–400 ms, a pass every 60 s unless woken.
    static let quick = SyncLoop.Timing(passInterval: .seconds(60), firstRetry: .milliseconds(100), longestRetry: .milliseconds(400))

    /// How long a test waits for a pass that an event (a notification, `wake`, a move) must
    /// run: half of `quick`'s 60 s interval, so that only the event can have run it, and far
    /// above any stall of a busy machine.
    static let beforeTheIntervalPass: Duration = .seconds(30)

    /// Polls `condition` until it holds or `timeout` passes; whether it held.
    static func eventually(within timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.002)
        }
        return condition()
    }

    static func loop(_ f: F, timing: SyncLoop.Timing = quick, url: String? = nil,
                     pass: @escaping SyncLoop.Pass) throws -> SyncLoop {
        let loop = try SyncLoop(connectionString: url ?? f.cluster.url, circleID: f.circle, timing: timing, pass: pass)
        try loop.start()
        return loop
    }

    @Test func theFirstPassRunsAsSoonAsTheLoopIsConnected() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f) { _ in log.started() }
        defer { loop.stop() }
        #expect(Self.eventually { loop.status.state == .ok })
        #expect(log.count == 1)
        #expect(loop.status.lastError == nil && loop.status.lastSuccessfulPass != nil)
    }

    @Test func anotherDevicesPushRunsAPass() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f) { _ in log.started() }
        defer { loop.stop() }
        #expect(Self.eventually { log.count == 1 })
        var latencies: [Duration] = []
        for i in 1...20 {
            let before = log.count
            let pushed = ContinuousClock.now
            _ = try f.push([F.row(i, mdat: 1, counter: Int64(i))])
            #expect(Self.eventually(within: Self.beforeTheIntervalPass) { log.count > before }, "push \(i)")
            if let start = log.startTimes.dropFirst(before).first { latencies.append(start - pushed) }
        }
        print("SyncLoopTests: another device's push (start of its transaction) to the loop's pass starting, median \(medianMilliseconds(latencies)) over \(latencies.count)")
    }

    @Test func wakeRunsAPass() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f) { _ in log.started() }
        defer { loop.stop() }
        #expect(Self.eventually { log.count == 1 })
        loop.wake()
        #expect(Self.eventually(within: Self.beforeTheIntervalPass) { log.count == 2 })
    }

    @Test func afterFollowingAnotherCircleItsChannelWakesTheLoopAndTheOldOneNoLonger() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f) { _ in log.started() }
        defer { loop.stop() }
        #expect(Self.eventually { log.count == 1 })
        let next = SyncCircleID.random()
        loop.follow(circleID: next)
        // Moving runs a pass: what was pushed to the new circle before the LISTEN is pulled by it.
        #expect(Self.eventually(within: Self.beforeTheIntervalPass) { log.count == 2 })
        let sender = try PostgresConnection(f.cluster.url)
        defer { sender.close() }
        try sender.notify(SyncDatabase.channel(circleID: f.circle.bytes), payload: "old")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(log.count == 2)
        try sender.notify(SyncDatabase.channel(circleID: next.bytes), payload: "new")
        #expect(Self.eventually(within: Self.beforeTheIntervalPass) { log.count == 3 })
    }

    @Test func thePassRunsWhenTheIntervalPassesWithoutAWakeup() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f, timing: SyncLoop.Timing(passInterval: .milliseconds(200))) { _ in log.started() }
        defer { loop.stop() }
        #expect(Self.eventually { log.count >= 3 }, "\(log.count) passes")
    }

    @Test func theLoopsOwnPushDoesNotRunAnotherPass() throws {
        let f = try F()
        let log = PassLog()
        let circle = f.circle
        let loop = try Self.loop(f) { (db) throws(KeychainError) in
            log.started()
            let n = log.count
            _ = try db.push(circleID: circle, epoch: 1, rows: [F.row(n, mdat: 1, counter: Int64(n))],
                            head: F.head(circle: circle, counter: Int64(n)))
        }
        defer { loop.stop() }
        #expect(Self.eventually { log.count == 1 && loop.status.state == .ok })
        Thread.sleep(forTimeInterval: 0.3)
        #expect(log.count == 1)
        #expect(try f.all().count == 1)
    }

    @Test func aFailedPassIsReportedAndRetriedAtTheNextWake() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f) { (_) throws(KeychainError) in
            log.started()
            if log.count == 1 { throw KeychainError(.interactionNotAllowed, "the circle key is locked") }
        }
        defer { loop.stop() }
        #expect(Self.eventually { loop.status.state == .error })
        #expect(loop.status.lastError?.contains("the circle key is locked") == true)
        #expect(loop.status.lastSuccessfulPass == nil)
        loop.wake()
        #expect(Self.eventually { loop.status.state == .ok })
        #expect(loop.status.lastError == nil && log.count == 2)
    }

    @Test func runPassNowAnswersAfterAPassThatStartedAfterTheCallAndCarriesItsError() throws {
        let f = try F()
        let log = PassLog()
        let failNext = Shared(false)
        let loop = try Self.loop(f) { (_) throws(KeychainError) in
            log.started()
            defer { log.finished() }
            Thread.sleep(forTimeInterval: 0.2)
            if failNext.current { throw KeychainError(.decode, "a record did not open") }
        }
        defer { loop.stop() }
        // Asked while the first pass runs: that one does not count.
        #expect(Self.eventually { log.count == 1 })
        let asked = ContinuousClock.now
        try loop.runPassNow(timeout: .seconds(5))
        #expect(log.passRan(after: asked))

        failNext.update { $0 = true }
        expectError(.decode) { try loop.runPassNow(timeout: .seconds(5)) }
        // Too short a wait is its own error.
        expectError(.notAvailable) { try loop.runPassNow(timeout: .milliseconds(10)) }
    }

    @Test func theLoopReconnectsAndRunsItsPassAfterTheServerIsHaltedAndResumed() throws {
        let f = try F()
        let log = PassLog()
        let circle = f.circle
        let loop = try Self.loop(f) { (db) throws(KeychainError) in
            log.started()
            _ = try db.circleState(circleID: circle)
        }
        defer { loop.stop() }
        #expect(Self.eventually { loop.status.state == .ok })

        try f.cluster.halt()
        #expect(Self.eventually { loop.status.state == .error })
        #expect(loop.status.lastError?.contains(f.cluster.password) == false)
        let passesBefore = log.count
        try f.cluster.resume()
        #expect(Self.eventually { log.count > passesBefore && loop.status.state == .ok })
        // The new connection listens again.
        let before = log.count
        _ = try f.push([F.row(1, mdat: 1, counter: 1)], on: try f.peer())
        #expect(Self.eventually(within: Self.beforeTheIntervalPass) { log.count > before })
    }

    @Test func syncNowWhileTheServerIsDownAnswersAtOnceAndConnectsWithoutWaitingOutTheBackoff() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f, timing: SyncLoop.Timing(firstRetry: .seconds(30))) { _ in log.started() }
        defer { loop.stop() }
        #expect(Self.eventually { loop.status.state == .ok })
        try f.cluster.halt()
        #expect(Self.eventually { loop.status.state == .error })
        // The thread waits out a 30 s backoff; `sync now` tries at once and answers with the
        // connect error, not with its own 10 s time-out (which waiting for the thread would be).
        let error = expectError(.notAvailable) { try loop.runPassNow(timeout: .seconds(10)) }
        #expect(error?.message.contains("no sync pass finished") == false, "\(String(describing: error))")

        try f.cluster.resume()
        try loop.runPassNow(timeout: .seconds(10))  // a pass within 10 s: the backoff was cut short
        #expect(loop.status.state == .ok && log.count == 2)
    }

    @Test func aConnectionThatBreaksBeforeAnyPassSucceedsIsRetriedWithBackoff() throws {
        let f = try F()
        let log = PassLog()
        // Every pass ends its own server process: the connect succeeds, the pass never does.
        let loop = try Self.loop(f, timing: SyncLoop.Timing(firstRetry: .milliseconds(200), longestRetry: .milliseconds(200))) { (db) throws(KeychainError) in
            log.started()
            try db.connection.query("SELECT pg_terminate_backend(pg_backend_pid())")
        }
        defer { loop.stop() }
        #expect(Self.eventually { log.count >= 4 }, "\(log.count) passes")
        #expect(loop.status.state == .error)
        // Each attempt waits 150–250 ms (200 ms with its jitter) after the last one broke, then
        // connects: not a reconnect at full speed. Gaps, not a count in a fixed second, so
        // that a slow connect on a busy machine does not look like a missing retry.
        let starts = log.startTimes
        let gaps = zip(starts.dropFirst(), starts).map { $0 - $1 }
        #expect(gaps.allSatisfy { $0 >= .milliseconds(150) }, "\(gaps)")
    }

    @Test func stopDoesNotWaitOutTheBackoffWhileTheServerIsHalted() throws {
        let f = try F()
        let loop = try Self.loop(f, timing: SyncLoop.Timing(firstRetry: .seconds(30))) { _ in }
        #expect(Self.eventually { loop.status.state == .ok })
        try f.cluster.halt()
        #expect(Self.eventually { loop.status.state == .error })
        // The thread now waits out a 30 s backoff; it exits well within it.
        #expect(loop.stop(timeout: .seconds(10)))
        expectError(.notAvailable) { try loop.runPassNow(timeout: .seconds(1)) }
    }

    @Test func stopReturnsWithinItsBoundWhileTheConnectWaitsOnAHostThatNeverAnswers() throws {
        let silent = try SilentServer()
        let loop = try SyncLoop(connectionString: "host=127.0.0.1 port=\(silent.port) dbname=k user=k connect_timeout=60",
                                circleID: SyncCircleID.random(), timing: Self.quick) { _ in }
        try loop.start()
        Thread.sleep(forTimeInterval: 0.5)  // the thread is inside its connect
        #expect(loop.status.state == .connecting)
        let start = ContinuousClock.now
        // Within its 5 s bound, against a 60 s connect: no wall-clock bound of the test's own.
        #expect(loop.stop(timeout: .seconds(5)))
        let took = ContinuousClock.now - start
        print("SyncLoopTests: stop during a connect to a silent host took \(took)")
    }

    @Test func stopCancelsAStatementThePassIsRunning() throws {
        let f = try F()
        let log = PassLog()
        let loop = try Self.loop(f) { (db) throws(KeychainError) in
            log.started()
            // A pass of several long statements: each must be cancelled in turn.
            for _ in 0..<3 { try db.connection.query("SELECT pg_sleep(20)") }
        }
        #expect(Self.eventually { log.count == 1 })
        Thread.sleep(forTimeInterval: 0.1)
        // Three 20 s statements: only cancelling each lets the thread exit within 10 s.
        #expect(loop.stop(timeout: .seconds(10)))
    }

    @Test func aConnectErrorIsReportedWithoutThePassword() throws {
        let f = try F()
        let wrong = f.cluster.url.replacingOccurrences(of: f.cluster.password, with: "Wr0ngPassw0rdXYZ")
        let loop = try Self.loop(f, url: wrong) { _ in Issue.record("a pass ran without a connection") }
        defer { loop.stop() }
        #expect(Self.eventually { loop.status.state == .error })
        let message = loop.status.lastError ?? ""
        #expect(message.contains("authentication") || message.contains("password"), "\(message)")
        #expect(!message.contains("Wr0ngPassw0rdXYZ") && !message.contains(f.cluster.password) && !message.contains("postgresql://"), "\(message)")
    }
}
