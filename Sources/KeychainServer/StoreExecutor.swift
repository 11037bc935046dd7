import Foundation
import KeychainModel
import KeychainProtocol
import KeychainStore
import Synchronization

/// The one owner of the store. A request runs on its connection's own thread while holding
/// `storeLock`, so a call costs no thread hand-off (each wake-up costs tens of microseconds on
/// the machines here). Writes commit in groups: a writer queues its request, then takes the
/// lock; whoever holds it runs every queued write in one transaction with a single fsync, so
/// eight clients adding at once pay for about one durable commit, not eight. A writer whose
/// request a previous holder already committed finds it done and returns at once. Every
/// reply is sent only after its commit. A call that runs Argon2id (unlock, passcode changes,
/// backup, restore) holds the lock before and after it, not during it.
final class StoreExecutor: @unchecked Sendable {
    private final class Job {
        let request: Request
        let caller: Caller
        let policy: AccessPolicy
        // Written and read under storeLock only.
        var response = Response()
        var done = false

        init(_ request: Request, _ caller: Caller, _ policy: AccessPolicy) {
            self.request = request
            self.caller = caller
            self.policy = policy
        }
    }

    /// Guards `handler` (and so the store) and every Job's response.
    private let storeLock = NSLock()
    private var handler: RequestHandler?
    /// Held by a call that derives a key from its first step to its last, so that one Argon2id
    /// runs at a time: it takes 256 MiB at the default cost, and clients sending many at once
    /// would otherwise take a multiple of it. It also queues passcode checks behind each
    /// other as the store's lock did, so that each wrong passcode is counted before the next
    /// check looks at the wrong-passcode delay. Taken before `storeLock`, never after.
    private let derivationGate = Mutex<Void>(())
    /// Guards `pending`: writes waiting for the next group commit.
    private let queueLock = NSLock()
    private var pending: [Job] = []

    /// Wakes the timer thread early (a lock event may have set an earlier deadline).
    private let timerCondition = NSCondition()
    private var timerStopping = false
    private let timerDone = DispatchSemaphore(value: 0)

    /// What a config reload replaces: read once per call under its own lock, never the
    /// store's, so that it adds no contention on the hot path.
    private struct Settings {
        var policy: AccessPolicy
        var audit: AuditLog?
        /// The same handler as `handler`, for reads, which take the store's lock only for
        /// their lookup; nil once stopped.
        var reader: RequestHandler?
    }

    private let settingsLock = NSLock()
    private var settings: Settings
    private let executablesMatter: Atomic<Bool>

    /// Whether any application is told apart by its executable. Only then does each request
    /// re-check its process's executable: otherwise the executable grants nothing, and the
    /// check would cost every call a system call for no promise.
    var identifiesByExecutable: Bool { executablesMatter.load(ordering: .relaxed) }

    init(store: ItemStore, policy: AccessPolicy, lockPolicy: LockPolicy, audit: AuditLog?,
         log: @escaping (String) -> Void) throws(KeychainError) {
        handler = try RequestHandler(store: store, lockPolicy: lockPolicy, log: log)
        settings = Settings(policy: policy, audit: audit, reader: handler)
        executablesMatter = Atomic(policy.identifiesByExecutable)
        let thread = Thread { [self] in self.runTimer() }
        thread.name = "keychaind-lock-timer"
        thread.start()
    }

    /// A lock event from the host (a signal, a session-lock hook).
    func lock(reason: String) {
        storeLock.lock()
        handler?.lock(reason: reason)
        storeLock.unlock()
        wakeTimer()
    }

    private func wakeTimer() {
        timerCondition.lock()
        timerCondition.signal()
        timerCondition.unlock()
    }

    /// Runs time-driven lock events (grace periods ending, idle auto-lock) when they are due.
    private func runTimer() {
        while true {
            storeLock.lock()
            handler?.tick()
            let deadline = handler?.nextDeadline()
            storeLock.unlock()
            timerCondition.lock()
            if timerStopping {
                timerCondition.unlock()
                break
            }
            let wait = deadline.map { max(0.001, $0 - DaemonClock.system.monotonic()) } ?? 3600
            _ = timerCondition.wait(until: Date().addingTimeInterval(wait))
            let stop = timerStopping
            timerCondition.unlock()
            if stop { break }
        }
        timerDone.signal()
    }

    /// Runs `request` against the store, records it in the audit log, and returns its response.
    /// A long list answer goes in pages: every page but the last is handed to `emit` (which
    /// sends it, and says false when the client is gone), the last is returned.
    func submit(_ request: Request, from caller: Caller, emit: (Response) -> Bool = { _ in true }) -> Response {
        settingsLock.lock()
        let current = settings
        settingsLock.unlock()
        let response = run(request, from: caller, policy: current.policy, reader: current.reader, emit: emit)
        current.audit?.record(request, caller: caller, app: current.policy.appID(for: caller),
                              defaultGroup: current.policy.scope(for: caller).groups.first, response: response)
        return response
    }

    /// Replaces the access policy and the audit log (a config reload); calls already running
    /// finish under the old ones.
    func reload(policy: AccessPolicy, audit: AuditLog?) {
        settingsLock.lock()
        settings.policy = policy
        settings.audit = audit
        executablesMatter.store(policy.identifiesByExecutable, ordering: .relaxed)
        settingsLock.unlock()
    }

    private func run(_ request: Request, from caller: Caller, policy: AccessPolicy, reader: RequestHandler?,
                     emit: (Response) -> Bool) -> Response {
        if case .copyMatching(let query) = request {
            guard let reader else { return Self.stopping }
            return search(query, from: caller, request: request, policy: policy, handler: reader, emit: emit)
        }
        if request.derivesKey {
            let response = deriving(request, from: caller, policy: policy)
            wakeTimer()
            return response
        }
        guard request.writesItems else {
            storeLock.lock()
            let response = handler?.handle(request, from: caller, policy: policy) ?? Self.stopping
            storeLock.unlock()
            if request.isAdministrative { wakeTimer() }
            return response
        }
        let job = Job(request, caller, policy)
        queueLock.lock()
        pending.append(job)
        queueLock.unlock()

        storeLock.lock()
        defer { storeLock.unlock() }
        if job.done { return job.response }  // committed by the previous holder's group
        queueLock.lock()
        let group = pending
        pending.removeAll(keepingCapacity: true)
        queueLock.unlock()
        if let handler {
            if group.count == 1 {
                job.response = handler.handle(request, from: caller, policy: policy)
            } else {
                runGrouped(group, handler)
            }
        } else {
            for j in group { j.response = Self.stopping }
        }
        for j in group { j.done = true }
        return job.response
    }

    /// A call that runs Argon2id holds the store's lock only to check it and copy what it needs,
    /// and to install the result: every other call goes on meanwhile.
    private func deriving(_ request: Request, from caller: Caller, policy: AccessPolicy) -> Response {
        derivationGate.withLock { _ in
            let step = storeLock.withLock { handler?.begin(request, from: caller, policy: policy) }
            guard case .derive(let derivation)? = step else {
                if case .answered(let response)? = step { return response }
                return Self.stopping
            }
            let outcome = Result { () throws(KeychainError) in try derivation.run() }
            return storeLock.withLock { handler?.finish(derivation, outcome, from: caller) } ?? Self.stopping
        }
    }

    /// A read holds the lock only for its SQL lookup: parsing before it, and decryption and
    /// the result after it, run on the caller's thread alongside other calls.
    private func search(_ query: AttributeDictionary, from caller: Caller, request: Request,
                        policy: AccessPolicy, handler: RequestHandler, emit: (Response) -> Bool) -> Response {
        let store = handler.store
        do throws(KeychainError) {
            let scope = policy.scope(for: caller)
            if scope.groups.isEmpty { throw KeychainError(.missingEntitlement, policy.refusal(for: caller)) }
            guard let prepared = try store.prepareSearch(query, scope: scope) else {
                return locked { $0.handle(request, from: caller, policy: policy) }
            }
            if store.answersInPages(prepared) {
                return try searchInPages(prepared, store: store, handler: handler, emit: emit)
            }
            let fetched = try lookup(handler) { () throws(KeychainError) in try store.fetch(prepared) }
            guard let result = try store.finish(prepared, fetched) else {
                return locked { $0.handle(request, from: caller, policy: policy) }
            }
            return Response(result: result)
        } catch {
            return Response(error: error)
        }
    }

    /// A read's SQL lookup, the only part of it that holds the store's lock (and counts as
    /// activity for the idle auto-lock).
    private func lookup(_ handler: RequestHandler, _ body: () throws(KeychainError) -> FetchedRows) throws(KeychainError) -> FetchedRows {
        storeLock.lock()
        defer { storeLock.unlock() }
        handler.noteActivity()
        return try body()
    }

    /// A list answer, page by page: each page's rows are looked up under the lock (keyset
    /// paging by rowid), opened and shaped outside it, and sent once about a frame's worth has
    /// gathered. Memory per call is a page or two, whatever the answer's length.
    private func searchInPages(_ prepared: PreparedSearch, store: ItemStore, handler: RequestHandler,
                               emit: (Response) -> Bool) throws(KeychainError) -> Response {
        var pending: [ItemResult] = []
        var pendingBytes = 0
        var matched = 0
        var corrupt = 0
        var after: Int64? = 0
        let wanted = store.wantedMatches(prepared)
        while let start = after {
            let selection = store.pageSelection(prepared, after: start)
            let fetched = try lookup(handler) { () throws(KeychainError) in try store.fetchPage(selection) }
            let page = try store.finishPage(prepared, fetched, wanted: wanted.map { $0 - matched })
            matched += page.matched
            corrupt += page.corrupt
            after = page.next
            for result in page.results {
                let size = WireCodec.encodedSize(result)
                if !pending.isEmpty && pendingBytes + size > ItemStore.pageBytes {
                    guard emit(Response(result: .list(pending), continues: true)) else {
                        throw KeychainError(.io, "the client left in the middle of a long answer")
                    }
                    pending.removeAll(keepingCapacity: true)
                    pendingBytes = 0
                }
                pending.append(result)
                pendingBytes += size
            }
        }
        guard matched > 0 else { throw ItemStore.nothingFound(corrupt: corrupt) }
        return Response(result: .list(pending))
    }

    private func locked(_ body: (RequestHandler) -> Response) -> Response {
        storeLock.lock()
        defer { storeLock.unlock() }
        guard let handler else { return Self.stopping }
        return body(handler)
    }

    /// Releases the store once in-flight calls are done (its class keys are zeroed as the last
    /// references go). Later calls are told the daemon is stopping.
    func stop() {
        timerCondition.lock()
        timerStopping = true
        timerCondition.signal()
        timerCondition.unlock()
        timerDone.wait()
        settingsLock.lock()
        settings.reader = nil
        settingsLock.unlock()
        storeLock.lock()
        handler = nil
        storeLock.unlock()
    }

    private static let stopping = Response(error: KeychainError(.serviceNotAvailable, "keychaind is shutting down"))

    private func runGrouped(_ group: [Job], _ handler: RequestHandler) {
        do throws(KeychainError) {
            try handler.store.inOneTransaction {
                for job in group { job.response = handler.handle(job.request, from: job.caller, policy: job.policy) }
            }
        } catch {
            // The commit failed: nothing in the group took effect, and every caller hears so.
            for job in group { job.response = Response(error: error) }
        }
    }

    /// Records the one call a refused caller gets answered (denied calls are audited too).
    func audit(refused request: Request, from caller: Caller, response: Response) {
        settingsLock.lock()
        let current = settings
        settingsLock.unlock()
        current.audit?.record(request, caller: caller, app: current.policy.appID(for: caller), defaultGroup: nil, response: response)
    }

    /// Why the policy in force refuses `caller` outright (no access group, and not an admin),
    /// or nil when it may make some call.
    func refusal(for caller: Caller) -> String? {
        settingsLock.lock()
        let policy = settings.policy
        settingsLock.unlock()
        guard policy.scope(for: caller).groups.isEmpty, !policy.isAdmin(caller) else { return nil }
        return policy.refusal(for: caller)
    }
}
