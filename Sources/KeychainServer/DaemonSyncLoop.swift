import KeychainCrypto
import KeychainModel
import KeychainStore
import KeychainSync
import Synchronization

/// The daemon's one sync thread (docs/sync.md, 7.2): started once it can run (`[sync]`
/// configured, a local circle row that is not forked, and ck loaded since boot, since the
/// identity and circle keys are sealed under it), woken by local writes that queued a push,
/// stopped with the daemon. A pending device's thread only refreshes its membership until a
/// member approves it. The thread outlives a leave or an erase and follows the keychain into
/// the next circle it joins or creates.
final class DaemonSyncLoop: Sendable {
    /// The loop's state and what its passes did, for status.
    struct Report: Sendable {
        var status: SyncLoop.Status
        var totals: SyncPassTotals
    }

    private struct Running: Sendable {
        let loop: SyncLoop
        let totals: @Sendable () -> SyncPassTotals
        /// The circle whose notifications the thread listens for.
        var circleID: SyncCircleID
    }

    /// What `startIfReady` found to do.
    private enum Step: Sendable {
        case nothing
        case moved
        case start(SyncCircleID)
    }

    private struct State: ~Copyable {
        var running: Running?
        /// Set by `stop()`: nothing starts after it.
        var stopped = false
    }

    private let database: String?
    private let timing: SyncLoop.Timing
    private let log: @Sendable (String) -> Void
    private let state = Mutex(State())

    init(database: String?, timing: SyncLoop.Timing = SyncLoop.Timing(), log: @escaping @Sendable (String) -> Void) {
        self.database = database
        self.timing = timing
        self.log = log
    }

    var isRunning: Bool { state.withLock { $0.running != nil } }

    /// Starts the thread if it can run now and is not running; if it runs for another circle
    /// than the store's (the keychain left or was erased, then joined or created another),
    /// moves it to the store's. Cheap when sync is not configured; otherwise one read of the
    /// circle row under the store's lock (the caller must not hold it).
    func startIfReady<Store: SyncLocalStore & Sendable>(store: Store) {
        guard let database, !state.withLock({ $0.stopped }) else { return }
        // Decided under the store's lock, so that a call that read the circle before a join
        // cannot move the thread back after one that read it after.
        let step = try? store.withReplica { (s) throws(KeychainError) -> Step in
            guard let circle = try LocalCircle(s).row(), circle.state != SyncCircleState.forked, circle.state != SyncCircleState.removed,
                  s.classKey(.afterFirstUnlock) != nil else { return .nothing }
            let circleID = try SyncCircleID(circle.circleID)
            return state.withLock { (current) -> Step in
                guard let running = current.running else { return .start(circleID) }
                guard running.circleID != circleID else { return .nothing }
                running.loop.follow(circleID: circleID)
                current.running?.circleID = circleID
                return .moved
            }
        }
        guard let step else { return }
        let circleID: SyncCircleID
        switch step {
        case .nothing: return
        case .moved:
            log("the sync thread follows the keychain to another circle")
            return
        case .start(let id): circleID = id
        }
        let engine = SyncEngine(store: store)
        let loop: SyncLoop
        do throws(KeychainError) {
            loop = try SyncLoop(connectionString: database, circleID: circleID, timing: timing) { (db) throws(KeychainError) in
                try engine.pass(db)
            }
        } catch {
            log("sync thread not started: \(error.message)")
            return
        }
        let started = state.withLock { (s) -> Bool in
            guard s.running == nil, !s.stopped else { return false }
            s.running = Running(loop: loop, totals: { engine.totals }, circleID: circleID)
            return true
        }
        guard started else { return }
        do throws(KeychainError) {
            try loop.start()
            log("sync thread started")
        } catch {
            state.withLock { $0.running = nil }
            log("sync thread not started: \(error.message)")
        }
    }

    /// A pass soon (a local write queued a push, a membership call changed something).
    func wake() { state.withLock { $0.running?.loop }?.wake() }

    /// `sync now`: a pass that starts after this call, its error thrown; nil if no thread runs.
    func runPassNow(timeout: Duration) throws(KeychainError) -> Bool {
        guard let loop = state.withLock({ $0.running?.loop }) else { return false }
        try loop.runPassNow(timeout: timeout)
        return true
    }

    var report: Report? {
        guard let running = state.withLock({ $0.running }) else { return nil }
        return Report(status: running.loop.status, totals: running.totals())
    }

    /// Stops the thread (bounded: see SyncLoop.stop) and keeps any from starting again.
    func stop(timeout: Duration = .seconds(5)) {
        let running = state.withLock { (s) -> Running? in
            s.stopped = true
            defer { s.running = nil }
            return s.running
        }
        guard let running else { return }
        if !running.loop.stop(timeout: timeout) { log("the sync thread did not stop within \(timeout); leaving it") }
    }
}
