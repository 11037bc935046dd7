#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import KeychainCrypto
import KeychainModel
import Synchronization

/// The sync thread (docs/sync.md, 7.2): one thread and one PostgreSQL connection per daemon.
/// It connects (retrying with backoff while the server is unreachable), LISTENs on the
/// circle's channel, and runs `pass` at once, then whenever another device's push notifies,
/// `wake()` is called (a local sync write, `sync now`), or `passInterval` goes by without
/// either. What a pass does (membership refresh, push, pull, housekeeping) is the caller's;
/// the loop owns the connection, the waiting and the status.
///
/// A pass that throws leaves its error in `status` and is tried again at the next wake-up;
/// a lost connection sends the thread back to connecting, and the first pass on the new
/// connection catches up by cursor (a new session may have missed notifications).
public final class SyncLoop: Sendable {
    public typealias Pass = @Sendable (SyncDatabase) throws(KeychainError) -> Void

    public struct Timing: Sendable {
        /// The longest the thread waits without a pass: a missed notification costs at most this.
        public var passInterval: Duration
        /// The first wait after a failed connect, doubled after each further failure up to
        /// `longestRetry`, each wait scaled by a random factor in [0.75, 1.25) so that many
        /// devices do not reconnect in step after the server returns.
        public var firstRetry: Duration
        public var longestRetry: Duration
        /// The connection's statement timeout (PostgresConnection.statementTimeout).
        public var statementTimeout: Duration

        public init(passInterval: Duration = .seconds(60), firstRetry: Duration = .seconds(1),
                    longestRetry: Duration = .seconds(60), statementTimeout: Duration = .seconds(30)) {
            self.passInterval = passInterval
            self.firstRetry = firstRetry
            self.longestRetry = longestRetry
            self.statementTimeout = statementTimeout
        }
    }

    public enum State: String, Sendable, Equatable {
        /// Started, no connect or pass has ended yet.
        case connecting
        /// The last pass succeeded.
        case ok
        /// The last connect or pass failed, or the connection was lost (`lastError` says
        /// which); the thread retries.
        case error
    }

    /// What `keychain sync status` shows of the loop (op 32).
    public struct Status: Sendable, Equatable {
        public var state: State
        /// Why the last connect or pass failed; nil once a pass succeeds. PostgreSQL's messages
        /// reach it scrubbed of the password, and the connection string is never part of it;
        /// its `underlying` PostgresFailure says which kind of failure it was.
        public var lastFailure: KeychainError?
        /// `lastFailure`'s status and message.
        public var lastError: String? { lastFailure?.description }
        /// When the last pass succeeded, in ms since 2001; nil before the first.
        public var lastSuccessfulPass: Int64?
        /// Passes finished so far, failed ones included.
        public var passes: Int
    }

    private struct Shared: ~Copyable {
        init(channel: String) { self.channel = channel }

        var status = Status(state: .connecting, lastFailure: nil, lastSuccessfulPass: nil, passes: 0)
        var started = false
        var stopping = false
        var exited = false
        /// Cancels the statement running on the thread's connection, while there is one.
        var canceller: PostgresConnection.Canceller?
        /// Tickets of `runPassNow` handed out so far: each asks for a pass that starts after it.
        var requested: UInt64 = 0
        /// The highest ticket answered, by a pass that covered it or by a failed connect.
        var answered: UInt64 = 0
        var waiters: [UInt64: DispatchSemaphore] = [:]
        var answers: [UInt64: Result<Void, KeychainError>] = [:]
        /// The channel of the circle the loop serves now (`follow(circleID:)` changes it).
        var channel: String

        /// Gives every waiting ticket up to `ticket` its answer.
        mutating func answer(upTo ticket: UInt64, with result: Result<Void, KeychainError>) {
            answered = max(answered, ticket)
            for (waiting, semaphore) in waiters where waiting <= ticket {
                answers[waiting] = result
                waiters[waiting] = nil
                semaphore.signal()
            }
        }
    }

    private let connectionString: String
    private let timing: Timing
    private let pass: Pass
    private let wakeup: Wakeup
    /// Signalled by `stop()` alone: a connect in progress watches it (a wake-up must not end one).
    private let stopSignal: Wakeup
    private let shared: Mutex<Shared>
    private let exitSignal = DispatchSemaphore(value: 0)

    /// A loop for the circle `circleID` in the database `connectionString` (libpq conninfo or
    /// URI; kept only in memory and never repeated in a message). Nothing runs until `start()`.
    public init(connectionString: String, circleID: SyncCircleID, timing: Timing = Timing(), pass: @escaping Pass) throws(KeychainError) {
        self.connectionString = connectionString
        shared = Mutex(Shared(channel: SyncDatabase.channel(circleID: circleID.bytes)))
        self.timing = timing
        self.pass = pass
        wakeup = try Wakeup()
        stopSignal = try Wakeup()
    }

    /// Starts the thread; once only.
    public func start() throws(KeychainError) {
        try shared.withLock { (s) throws(KeychainError) in
            guard !s.started else { throw KeychainError(.param, "the sync loop was started already") }
            s.started = true
        }
        guard DetachedThread.start({ [self] in run() }) else {
            shared.withLock { $0.exited = true }
            exitSignal.signal()
            throw KeychainError(.allocate, "cannot start the sync thread")
        }
    }

    /// Asks for a pass soon: at once if the thread is waiting on the database, after the
    /// running pass if one runs. While the database is unreachable it only marks the pass due
    /// for when the connection is back (a local write must not defeat the backoff).
    public func wake() { wakeup.signal() }

    public var status: Status { shared.withLock { $0.status } }

    /// Serves the circle `circleID` from now on: the thread moves its LISTEN to that circle's
    /// channel before its next pass (the keychain left or was erased, and joined another
    /// circle; the pass reads the circle afresh from the store, but the notifications it
    /// wakes on come from the channel).
    public func follow(circleID: SyncCircleID) {
        let channel = SyncDatabase.channel(circleID: circleID.bytes)
        let changed = shared.withLock { s in
            defer { s.channel = channel }
            return s.channel != channel
        }
        if changed { wakeup.signal() }
    }

    /// Runs a pass that starts after this call and returns when it has finished, throwing its
    /// error (`sync now`, op 39: "answer when caught up or on error"). While the database is
    /// unreachable the thread connects without waiting out its backoff (within a second of the
    /// last failure: see waitBeforeConnecting), and a failed connect is the answer. errSecNotAvailable if no pass ended within `timeout`
    /// or the loop is not running.
    public func runPassNow(timeout: Duration) throws(KeychainError) {
        let (ticket, done) = try shared.withLock { (s) throws(KeychainError) -> (UInt64, DispatchSemaphore) in
            guard s.started, !s.stopping, !s.exited else { throw KeychainError(.notAvailable, "the sync loop is not running") }
            s.requested += 1
            let done = DispatchSemaphore(value: 0)
            s.waiters[s.requested] = done
            return (s.requested, done)
        }
        wakeup.signal()
        _ = done.wait(timeout: .now() + .nanoseconds(Self.nanoseconds(timeout)))
        let answer = shared.withLock { s -> Result<Void, KeychainError>? in
            s.waiters[ticket] = nil
            return s.answers.removeValue(forKey: ticket)
        }
        guard let answer else {
            throw KeychainError(.notAvailable, "no sync pass finished within \(Self.milliseconds(timeout)) ms")
        }
        try answer.get()
    }

    /// Stops the thread: wakes its wait, gives up a connect in progress (a host that does not
    /// answer would hold it for `connect_timeout`), cancels the statement it runs (again and
    /// again: a pass may run several), and waits for it to exit, at most `timeout`. Returns
    /// whether it exited.
    @discardableResult
    public func stop(timeout: Duration = .seconds(5)) -> Bool {
        let started = shared.withLock { s in
            s.stopping = true
            return s.started
        }
        guard started else { return true }
        stopSignal.signal()
        wakeup.signal()
        let deadline = ContinuousClock.now + timeout
        while true {
            shared.withLock { $0.canceller }?.cancel()
            let slice = min(.milliseconds(50), deadline - ContinuousClock.now)
            if exitSignal.wait(timeout: .now() + .nanoseconds(Self.nanoseconds(slice))) == .success {
                exitSignal.signal() // for a later stop()
                return true
            }
            if ContinuousClock.now >= deadline { return false }
        }
    }

    // MARK: The thread

    private var isStopping: Bool { shared.withLock { $0.stopping } }

    private func run() {
        var retry = timing.firstRetry
        while !isStopping {
            let connection: PostgresConnection, listening: String
            do {
                guard let connected = try connect() else { break }
                (connection, listening) = connected
            } catch {
                failed(error, answering: true)
                guard waitBeforeConnecting(retry) else { break }
                retry = min(retry * 2, timing.longestRetry)
                continue
            }
            let passed = serve(connection, listening: listening)
            shared.withLock { $0.canceller = nil }
            connection.close()
            // A server that accepts connections and drops them before any pass succeeds gets
            // the same backoff as one that refuses them, not a reconnect at full speed.
            if passed {
                retry = timing.firstRetry
            } else if !isStopping {
                guard waitBeforeConnecting(retry) else { break }
                retry = min(retry * 2, timing.longestRetry)
            }
        }
        shared.withLock { s in
            s.exited = true
            s.answer(upTo: s.requested, with: .failure(KeychainError(.notAvailable, "the sync loop stopped")))
        }
        exitSignal.signal()
    }

    /// A new connection listening on the circle's channel (returned with it), its canceller
    /// where `stop()` finds it; nil if the loop stopped meanwhile.
    private func connect() throws(KeychainError) -> (PostgresConnection, String)? {
        let connection = try PostgresConnection(connectionString, stop: stopSignal)
        connection.statementTimeout = timing.statementTimeout
        let canceller = try connection.makeCanceller()
        let (stopping, channel) = shared.withLock { s in
            if !s.stopping { s.canceller = canceller }
            return (s.stopping, s.channel)
        }
        if stopping {
            connection.close()
            return nil
        }
        do {
            try connection.listen(channel)
        } catch {
            shared.withLock { $0.canceller = nil }
            connection.close()
            throw error
        }
        return (connection, channel)
    }

    /// Runs passes on `connection` until the loop stops or the connection is lost; whether
    /// any of them succeeded.
    private func serve(_ connection: PostgresConnection, listening: String) -> Bool {
        let database = SyncDatabase(connection)
        var listening = listening
        var due = true
        var passed = false
        while !isStopping {
            let channel = shared.withLock { $0.channel }
            if channel != listening {
                // LISTEN on the new channel before the pass: whatever was pushed before it is
                // pulled by the pass, whatever after it notifies.
                do {
                    try connection.listen(channel)
                    try connection.unlisten(listening)
                } catch {
                    failed(error, answering: false)
                    return passed
                }
                listening = channel
                due = true
            }
            if due {
                passed = runPass(database) || passed
                guard connection.isConnected else { return passed }
                due = false
                continue
            }
            do {
                switch try connection.waitForNotifications(wakeup: wakeup, timeout: timing.passInterval) {
                case .notified(let notifications):
                    // This device's own pushes notify its own channel too; they bring nothing new.
                    due = notifications.contains { $0.senderProcessID != connection.serverProcessID }
                case .woken, .timedOut:
                    due = true
                }
            } catch {
                failed(error, answering: false)
                return passed
            }
        }
        return passed
    }

    /// Runs the pass once and records how it went; whether it succeeded.
    private func runPass(_ database: SyncDatabase) -> Bool {
        let covers = shared.withLock { $0.requested }
        let result: Result<Void, KeychainError>
        do {
            try pass(database)
            result = .success(())
        } catch {
            result = .failure(error)
        }
        let now = Self.nowSince2001()
        shared.withLock { s in
            s.status.passes += 1
            switch result {
            case .success:
                s.status.state = .ok
                s.status.lastFailure = nil
                s.status.lastSuccessfulPass = now
            case .failure(let error):
                // A statement cancelled by stop() is not the database's fault.
                if !s.stopping {
                    s.status.state = .error
                    s.status.lastFailure = error
                }
            }
            s.answer(upTo: covers, with: result)
        }
        if case .success = result { return true }
        return false
    }

    /// Records a failed connect or a lost connection; a failed connect also answers the
    /// passes asked for, which cannot run until a connect succeeds.
    private func failed(_ error: KeychainError, answering: Bool) {
        shared.withLock { s in
            guard !s.stopping else { return }
            s.status.state = .error
            s.status.lastFailure = error
            if answering { s.answer(upTo: s.requested, with: .failure(error)) }
        }
    }

    /// Waits about `delay` (with jitter) before the next connect; cut short by `runPassNow`
    /// (connect soon) and by `stop()`. False if the loop is stopping. A `runPassNow` still
    /// waits until `firstRetry`, at most a second, has passed since the failure: any local user
    /// may call `sync now`, and a flood of it must not become a flood of connects (and of login
    /// attempts the database logs or locks the account for). The calls of that wait share the
    /// one connect and its answer.
    private func waitBeforeConnecting(_ delay: Duration) -> Bool {
        let failedAt = ContinuousClock.now
        let deadline = failedAt + delay * Double.random(in: 0.75..<1.25)
        let askedDeadline = failedAt + min(timing.firstRetry, .seconds(1))
        while true {
            let (stopping, asked) = shared.withLock { ($0.stopping, $0.requested > $0.answered) }
            if stopping { return false }
            if asked, ContinuousClock.now >= askedDeadline { return true }
            let remaining = (asked ? min(deadline, askedDeadline) : deadline) - ContinuousClock.now
            if remaining <= .zero { return true }
            var fd = pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0)
            if poll(&fd, 1, Int32(clamping: Self.milliseconds(remaining))) > 0 { wakeup.drain() }
        }
    }

    // MARK: Time

    private static func nanoseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = max(duration, .zero).components
        // The loop's waits are seconds to minutes; a day bounds any of them.
        return Int(min(seconds, 86_400)) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
    }

    /// Rounded up, so that a wait of under a millisecond still waits.
    private static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = max(duration, .zero).components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }

    private static func nowSince2001() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return (Int64(ts.tv_sec) - Int64(absoluteTimeIntervalSince1970)) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
