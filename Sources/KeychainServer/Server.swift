import Foundation
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore
import Logging
import Synchronization

/// Settings of a running daemon (flags and config file fill it in; docs in Config/keychaind.toml).
public struct ServerConfiguration: Sendable {
    public var socketPath: String
    public var store: StoreConfiguration
    /// How long a connection may sit idle between requests before it is closed.
    public var idleTimeoutMs: Int32 = 300_000
    /// How long a started frame may take to arrive in full.
    public var frameTimeoutMs: Int32 = 10_000
    /// Connections served at once; more are accepted and closed (logged, summed up).
    public var maxConnections = 256
    /// Connections one uid may hold at once; nil: an eighth of `maxConnections`.
    public var maxConnectionsPerUID: Int?
    /// Mode of the socket file.
    public var socketMode: mode_t = 0o600
    /// How long a connection whose client calls back to back watches for its next request
    /// before sleeping (BusyPoll); 0: never.
    public var busyPollMicroseconds = 50
    public var policy = AccessPolicy()
    public var lockPolicy = LockPolicy()
    /// The audit log (a file of JSON lines), if any.
    public var auditLogPath: String?
    public var auditIncludeNames = false
    /// `[sync] database`: the libpq conninfo of the sync database (checked at load); nil: no sync.
    public var syncDatabase: String?
    /// `credential_socket`: where systemd's LoadCredential= reads items (CredentialSocket); nil: none.
    public var credentialSocketPath: String?
    /// `[prompt]`: where items that ask first ask the person.
    public var prompt = PromptSettings()
    /// `[metrics]`: the scraper's listener (MetricsListener), if `listen` is set.
    public var metrics = MetricsSettings()
    /// `[expiry] sweep_seconds`: seconds between expiry sweeps.
    public var expirySweepSeconds: Double = 300

    public init(socketPath: String, store: StoreConfiguration) {
        self.socketPath = socketPath
        self.store = store
    }
}

/// The socket server: worker threads that each accept a connection and serve it to its end
/// (so a slow or stuck client holds only its own thread), and the StoreExecutor that owns the
/// store.
public final class KeychainServer: LifecycleService, Sendable {
    private let configuration: ServerConfiguration
    private let logger: Logger
    private let executor: StoreExecutor
    private let listener: UnixSocket
    /// Whether this daemon bound the socket file (and so removes it at stop); a socket the
    /// service manager handed over is the manager's, and stays for the next start.
    private let ownsSocketFile: Bool
    /// Written to at shutdown: wakes the workers waiting in accept without touching the
    /// listening socket itself (see UnixSocket.accept(waitingIn:)).
    private let wake: (read: Int32, write: Int32)
    private let workersRunning = DispatchGroup()
    private let busyPoll: BusyPoll
    private let credentials: CredentialSocket?
    /// Whether this daemon bound the credential socket's file (and so removes it at stop).
    private let ownsCredentialSocketFile: Bool
    /// The scraper's listener (`[metrics] listen`), on a thread of its own.
    private let metricsListener: MetricsListener?

    /// What the workers share: who is connected, who waits in accept, whether it is stopping.
    private struct State {
        var connections: [Int32: UnixSocket] = [:]
        var admission: ConnectionAdmission
        var refusals = RefusalLog()
        var shuttingDown = false
        /// Workers now blocked in accept (or about to be).
        var acceptors = 0
        /// Workers started since the daemon started.
        var workersStarted = 0
    }
    private let state: Mutex<State>

    /// Opens the store and serves `listener` if one was handed over (socket activation), else
    /// binds the socket (replacing a stale one; refusing if a live daemon answers there).
    /// Throws with a message fit for the operator.
    public init(configuration: ServerConfiguration, listener handed: UnixSocket? = nil,
                credentialListener handedCredentials: UnixSocket? = nil, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        busyPoll = BusyPoll(windowMicroseconds: configuration.busyPollMicroseconds)
        state = Mutex(State(admission: ConnectionAdmission(
            maxConnections: configuration.maxConnections,
            maxPerUID: configuration.maxConnectionsPerUID ?? ConnectionAdmission.defaultPerUID(maxConnections: configuration.maxConnections))))
        // A live daemon on the socket is refused before the store makes its state directory.
        if handed == nil { try Self.claimSocketPath(configuration.socketPath) }
        // Before the item socket listens: once a client can connect, a scraper can too.
        metricsListener = try configuration.metrics.listen.map { try MetricsListener(configuration.metrics, endpoint: $0) }
        let store = try ItemStore(configuration: configuration.store)
        if let handed {
            listener = handed
            ownsSocketFile = false
        } else {
            do {
                listener = try UnixSocket.listen(path: configuration.socketPath, mode: configuration.socketMode)
            } catch {
                throw KeychainError(.io, "cannot listen on \(configuration.socketPath): \(error)")
            }
            ownsSocketFile = true
        }
        do {
            try listener.setNonBlocking()
        } catch {
            throw KeychainError(.io, "cannot use the socket \(configuration.socketPath): \(error)")
        }
        var pipeEnds: [Int32] = [-1, -1]
        guard pipe(&pipeEnds) == 0 else {
            throw SystemCallError.current("pipe").keychainError("cannot start the workers")
        }
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        wake = (pipeEnds[0], pipeEnds[1])
        let log = logger
        let audit = try configuration.auditLogPath.map {
            try AuditLog(path: $0, includeNames: configuration.auditIncludeNames, log: { log.warning("\($0)") })
        }
        let credentialListener: UnixSocket?
        if let handedCredentials {
            credentialListener = handedCredentials
        } else if let path = configuration.credentialSocketPath {
            try Self.claimSocketPath(path)
            do {
                credentialListener = try UnixSocket.listen(path: path, mode: 0o600)
            } catch {
                throw KeychainError(.io, "cannot listen on the credential socket \(path): \(error)")
            }
        } else {
            credentialListener = nil
        }
        ownsCredentialSocketFile = handedCredentials == nil && credentialListener != nil
        try? credentialListener?.setNonBlocking()
        let lockedAtStart = store.hasPasscode  // read before the store is handed to the executor's lock
        executor = try StoreExecutor(store: store, policy: configuration.policy, lockPolicy: configuration.lockPolicy,
                                     audit: audit, syncDatabase: configuration.syncDatabase,
                                     prompt: PresencePrompt(configuration.prompt), polkit: PolkitPrompt(configuration.prompt),
                                     contextMaxAge: Double(configuration.prompt.contextMaxAge),
                                     sweepInterval: configuration.expirySweepSeconds, log: { log.notice("\($0)") })
        if let credentialListener {
            credentials = CredentialSocket(listener: credentialListener, executor: executor) { warning, line in
                if warning { log.warning("\(line)") } else { log.notice("\(line)") }
            }
        } else {
            credentials = nil
        }
        if let endpoint = configuration.metrics.listen {
            logger.notice("metrics served to scrapers on \(endpoint) (GET /metrics)")
        }
        logger.info("keychaind ready", metadata: [
            "socket": "\(configuration.socketPath)\(handed == nil ? "" : " (from the service manager)")", "state": "\(configuration.store.stateDirectory)",
            "lock": "\(lockedAtStart ? "lockedSinceBoot" : "unlocked")",
        ])
    }

    /// Makes `path` free for our socket: a live daemon there is an error; a stale socket file
    /// (from a crash) is removed; anything that is not a socket is left alone and refused.
    static func claimSocketPath(_ path: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        guard (st.st_mode & S_IFMT) == S_IFSOCK else {
            throw KeychainError(.io, "\(path) exists and is not a socket; remove it or choose another --socket")
        }
        if let probe = try? UnixSocket.connect(path: path) {
            probe.close()
            throw KeychainError(.io, "another keychaind is already serving \(path); stop it first or choose another --socket")
        }
        unlink(path)
    }

    /// Serves connections until `shutdown()`; returns once every in-flight call has finished
    /// and the store is closed.
    public func run() {
        startServing()
        waitUntilStopped()
    }

    /// Starts the workers that accept connections, and returns.
    public func startServing() {
        state.withLock { reserveWorkers(Self.spareAcceptors, in: &$0) }
        for _ in 0..<Self.spareAcceptors { startWorker() }
        if let credentials {
            workersRunning.enter()
            let wakeRead = wake.read
            let thread = Thread { [self] in
                credentials.run(wake: wakeRead)
                workersRunning.leave()
            }
            thread.name = "keychaind-credentials"
            thread.start()
        }
        if let metricsListener {
            workersRunning.enter()
            let wakeRead = wake.read
            let executor = executor
            let thread = Thread { [self] in
                metricsListener.run(wake: wakeRead) { executor.metricsExposition() }
                workersRunning.leave()
            }
            thread.name = "keychaind-metrics"
            thread.start()
        }
    }

    /// Returns once `shutdown()` has been called, every in-flight call has finished and the
    /// store is closed; removes the socket file it bound.
    public func waitUntilStopped() {
        workersRunning.wait()
        executor.stop()
        if ownsSocketFile { unlink(configuration.socketPath) }
        if ownsCredentialSocketFile, let path = configuration.credentialSocketPath { unlink(path) }
        listener.close()
        credentials?.close()
        metricsListener?.close()
        close(wake.read)
        close(wake.write)
        logger.info("keychaind stopped")
    }

    /// Worker threads waiting in accept when the daemon starts; a worker that takes the last
    /// one's place starts another, so a connection always finds one waiting.
    static let spareAcceptors = 2
    /// Most workers left waiting in accept after their connections end; the rest exit.
    static let maximumIdleWorkers = 8

    /// How many worker threads have been started so far.
    var startedWorkers: Int {
        state.withLock { $0.workersStarted }
    }

    /// How many workers wait in accept (or are reserved to).
    var waitingAcceptors: Int {
        state.withLock { $0.acceptors }
    }

    /// Counts workers about to be started as waiting in accept, so that no other worker
    /// starts one for the same gap.
    private func reserveWorkers(_ count: Int, in state: inout State) {
        state.acceptors += count
        state.workersStarted += count
    }

    /// Starts a worker, reserved beforehand, that begins by accepting. A worker that starts
    /// another does so before it leaves `workersRunning` itself, so the group cannot drain
    /// in between.
    private func startWorker() {
        workersRunning.enter()
        let thread = Thread { [self] in self.work() }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// A worker: accepts a connection itself and serves it to its end, then accepts again. A
    /// new connection (each `keychain` command, each git credential lookup) so costs neither
    /// a thread's creation nor a hand-off between threads; one slow or stuck client still
    /// holds only its own worker.
    private func work() {
        defer { workersRunning.leave() }
        guard let waiter = connectionWaiter() else {
            state.withLock { $0.acceptors -= 1 }
            return
        }
        while true {
            let accepted: UnixSocket?
            do {
                accepted = try listener.accept(waitingIn: waiter)
            } catch {
                logger.error("accept failed: \(error)")
                Thread.sleep(forTimeInterval: 0.05)  // e.g. out of descriptors: do not spin
                continue
            }
            let (serving, replace) = state.withLock { state -> (Bool, Bool) in
                state.acceptors -= 1
                guard accepted != nil, !state.shuttingDown else { return (false, false) }
                guard state.acceptors == 0 else { return (true, false) }
                reserveWorkers(1, in: &state)
                return (true, true)
            }
            guard serving, let socket = accepted else {
                accepted?.close()
                return
            }
            if replace { startWorker() }
            // Who it is, from the kernel, and whether the policy refuses it: before it may
            // hold a slot (docs/security.md, "Fair service").
            // A connection made before a reload that starts telling apps apart by executable
            // holds no process: its next request is refused, and its client reconnects.
            // The policy read once for the connection's admission (a lock and a copy each time).
            let policy = executor.policy
            guard let (caller, process) = Caller.of(socket, holdingProcess: executor.identifiesByExecutable,
                                                         readingUnit: policy.identifiesByUnit,
                                                         readingStartTime: executor.asksThroughPolkit) else {
                logger.warning("closing a connection whose peer credentials cannot be read")
                socket.close()
                guard rejoinAcceptors() else { return }
                continue
            }
            let refusal = StoreExecutor.refusal(for: caller, by: policy)
            let (decision, line) = state.withLock { state -> (ConnectionAdmission.Decision, String?) in
                let decision = state.admission.admit(uid: caller.uid, refused: refusal != nil)
                if decision == .admit {
                    state.connections[socket.fd] = socket
                }
                let line = decision == .admit ? state.refusals.tick(at: DaemonClock.system.monotonic())
                    : state.refusals.note(Self.describe(decision, caller), at: DaemonClock.system.monotonic())
                return (decision, line)
            }
            if let line { logger.warning("\(line)") }
            executor.metrics.connectionAccepted()
            guard decision == .admit else {
                executor.metrics.refused(decision == .tooManyRefused ? "too_many_refused" : "too_many_connections")
                socket.close()
                guard rejoinAcceptors() else { return }
                continue
            }
            if let refusal {
                executor.metrics.refused("policy")
                serveRefused(socket, caller, refusal)
            } else {
                serve(socket, caller, process, bridge: bridgeLink(caller, process, policy: policy))
            }
            state.withLock { state in
                state.connections[socket.fd] = nil
                state.admission.release(uid: caller.uid, refused: refusal != nil)
            }
            socket.close()
            guard rejoinAcceptors() else { return }
        }
    }

    /// This worker's wait for connections, made once for as long as it accepts; nil if the
    /// daemon stops before one can be made (e.g. while out of descriptors).
    private func connectionWaiter() -> ConnectionWaiter? {
        while true {
            do {
                return try ConnectionWaiter(listener: listener, wake: wake.read)
            } catch {
                if state.withLock({ $0.shuttingDown }) { return nil }
                logger.error("cannot wait for connections: \(error)")
                Thread.sleep(forTimeInterval: 0.05)  // do not spin
            }
        }
    }

    /// After a connection: wait in accept again, unless enough workers already do or the
    /// daemon is stopping (then the worker ends: false).
    @discardableResult
    private func rejoinAcceptors() -> Bool {
        state.withLock { state in
            if state.shuttingDown || state.acceptors >= Self.maximumIdleWorkers { return false }
            state.acceptors += 1
            return true
        }
    }

    static func describe(_ decision: ConnectionAdmission.Decision, _ caller: Caller) -> String {
        switch decision {
        case .admit: "admitted"
        case .overUIDLimit: "uid \(caller.uid) is at its limit of connections"
        case .full: "every connection slot is taken"
        case .tooManyRefused: "uid \(caller.uid) matches no application and as many refused callers as allowed are connected"
        }
    }

    /// A caller the policy refuses gets one answer, to its first request, saying so and why,
    /// and the connection closes: it holds a slot for one frame at most, and learns nothing
    /// else (not even the lock state).
    private func serveRefused(_ socket: UnixSocket, _ caller: Caller, _ refusal: String) {
        let reader = FrameReader(socket, capacity: 1 << 10)
        guard let payload = try? reader.next(idleTimeoutMs: configuration.frameTimeoutMs, frameTimeoutMs: configuration.frameTimeoutMs) else { return }
        let response = Response(error: KeychainError(.missingEntitlement, refusal))
        if let request = try? WireCodec.decodeRequest(payload) { executor.audit(refused: request, from: caller, response: response) }
        try? socket.writeAll(WireCodec.frame(response))
    }

    /// Applies a reloaded config (SIGHUP): the access policy and the audit log. A new audit
    /// file that cannot be opened keeps everything as it was. Other settings (paths, time-outs,
    /// lock policy, Argon2id cost) take effect at the next start.
    public func reload(_ config: DaemonConfig, source: String) throws(KeychainError) {
        let log = logger
        let audit: AuditLog?
        do {
            audit = try config.auditLogPath.map {
                try AuditLog(path: $0, includeNames: config.auditIncludeNames, log: { log.warning("\($0)") })
            }
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(.io, "cannot open the audit log: \(error)")
        }
        let policy = config.accessPolicy(source: source)
        executor.reload(policy: policy, audit: audit)
        logger.notice("config reloaded: \(policy.applications.count) application(s), unknown callers: \(policy.unknownCallers.rawValue), audit log: \(config.auditLogPath ?? "none")")
    }

    /// A lock event from the host: SIGUSR1, which a session-lock or suspend hook sends
    /// (docs/security.md, "Lock events").
    public func lock(reason: String) {
        executor.lock(reason: reason)
    }

    /// Stops accepting, lets in-flight calls finish and closes idle connections. Safe to call
    /// from a signal-handling thread.
    public func shutdown() {
        let (first, pending) = state.withLock { state -> (Bool, String?) in
            guard !state.shuttingDown else { return (false, nil) }
            state.shuttingDown = true
            // Reads are woken; a connection mid-call still gets its response written before
            // its thread sees the shutdown.
            for socket in state.connections.values { socket.shutdownReading() }
            return (true, state.refusals.flush())
        }
        guard first else { return }
        if let pending { logger.warning("\(pending)") }
        var byte: UInt8 = 1
        _ = try? SystemCall.retrying("write") { write(wake.write, &byte, 1) }
    }

    /// For a connection from a configured bridge: what it needs to speak for other processes,
    /// holding the bridge's process (nil for every other connection, or if the process is gone
    /// or no longer runs what it ran a moment ago).
    private func bridgeLink(_ caller: Caller, _ process: PeerProcess?, policy: AccessPolicy) -> BridgeLink? {
        guard let executable = caller.executable, policy.isBridge(executable),
              let held = process ?? PeerProcess(pid: caller.pid, uid: caller.uid),
              held.executable() == executable else { return nil }
        return BridgeLink(process: held, executable: executable)
    }

    /// What the connection's request becomes once an asCaller is unwrapped: the inner request
    /// and the caller it is for, or the answer that refuses it.
    private enum Delegation {
        case run(Request, Caller, bridgePID: Int32)
        case refused(Response, closing: Bool)
    }

    /// Checks an asCaller (docs/security.md, "Calls through the Secret Service bridge"): the
    /// connection is a configured bridge still running what it connected with; the process it
    /// names runs as the bridge's uid and is the one that started at `startTime`; a portal
    /// call comes from a configured portal.
    private func delegate(_ inner: Request, pid: Int32, startTime: UInt64, bridge: BridgeLink?,
                          connection caller: Caller) -> Delegation {
        let policy = executor.policy
        guard let bridge, policy.isBridge(bridge.executable) else {
            return .refused(Response(error: KeychainError(.missingEntitlement,
                "asCaller is for the Secret Service bridge; \(caller.executable ?? "this program") is not in bridge_executables of \(policy.source)")), closing: false)
        }
        guard bridge.bridgeUnchanged() else {
            logger.warning("closing the connection of \(caller): its process no longer runs \(bridge.executable)")
            return .refused(Response(error: KeychainError(.missingEntitlement,
                "the process that opened this connection no longer runs the bridge it connected with; connect again")), closing: true)
        }
        let portal: Bool
        if case .portalSecret = inner { portal = true } else { portal = false }
        // A read of secrets may ask the person, whose prompt names the caller's executable.
        var readsSecrets = false
        if case .copyMatching(let query) = inner, query["r_Data"] == .bool(true) { readsSecrets = true }
        do throws(KeychainError) {
            let delegated = try bridge.caller(pid: pid, startTime: startTime, bridgeUID: caller.uid,
                                              withExecutable: portal || readsSecrets || policy.identifiesByExecutable,
                                              withUnit: policy.identifiesByUnit)
            if portal && !(delegated.executable.map(policy.portalExecutables.contains) ?? false) {
                throw KeychainError(.missingEntitlement, "portal secrets are for the desktop portal; pid \(pid) (\(delegated.executable ?? "unknown executable")) is not in portal_executables of \(policy.source)")
            }
            return .run(inner, delegated, bridgePID: caller.pid)
        } catch {
            return .refused(Response(error: error), closing: false)
        }
    }

    /// Op 47: one answer, then a frame of the change notices the caller may know of whenever
    /// some arrive (ChangeNotices.describe), until the client closes the connection or sends
    /// anything (a subscription takes no further request), or the daemon stops. Not subject to
    /// the idle timeout (a quiet keychain sends nothing, and the subscriber sends nothing), so
    /// ChangeNotices bounds how many one uid may hold.
    private func serveNotices(_ socket: UnixSocket, _ caller: Caller, _ process: PeerProcess?, bridge: BridgeLink?) {
        let subscription: ChangeNotices.Subscription
        do {
            subscription = try executor.notices.subscribe(uid: caller.uid)
        } catch {
            try? socket.writeAll(WireCodec.frame(Response(error: error)))
            return
        }
        defer { executor.notices.unsubscribe(subscription) }
        guard (try? socket.writeAll(WireCodec.frame(Response()))) != nil else { return }
        logger.debug("\(caller) subscribed to change notices")
        while true {
            var fds = [pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: subscription.wake, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 2, -1) >= 0 || errno == EINTR else { return }
            if fds[0].revents != 0 { return }
            guard fds[1].revents != 0 else { continue }
            // As for a request: a process that exec'd another program since it connected is
            // not told what the one it connected as may know.
            if executor.identifiesByExecutable, !(bridge?.bridgeUnchanged() ?? process?.stillRuns(caller.executable) ?? false) {
                logger.warning("closing the change notices of \(caller): its process no longer runs \(caller.executable ?? "the executable it connected with")")
                return
            }
            let policy = executor.policy
            let groups = policy.scope(for: caller).groups
            let described = subscription.take().compactMap {
                ChangeNotices.describe($0, subscriberPID: caller.pid, subscriberUID: caller.uid, groups: groups,
                                       isBridge: bridge != nil && policy.isBridge(caller.executable))
            }
            for start in stride(from: 0, to: described.count, by: 256) {
                let page = described[start..<min(start + 256, described.count)].map(ItemResult.attributes)
                guard (try? socket.writeAll(WireCodec.frame(Response(result: .list(page))))) != nil else { return }
            }
        }
    }

    private func serve(_ socket: UnixSocket, _ caller: Caller, _ process: PeerProcess?, bridge: BridgeLink?) {
        let reader = FrameReader(socket, capacity: 16 << 10)
        var pace = ConnectionPace(connection: Int(socket.fd))
        let connection = executor.contexts.openConnection()
        defer { executor.contexts.connectionClosed(connection) }
        while true {
            // SecretBytes: the frame, the request decoded from it and the response all live in
            // wiped memory, so whatever secret they held is zeroed as they are released.
            let payload: SecretBytes
            do {
                busyPoll.watch(reader, pace: pace)
                // A connection holding an authentication context waits for its next request as
                // long as it likes: closing it would end the context under the app's feet.
                let idle = executor.contexts.holdsAny(connection) ? -1 : configuration.idleTimeoutMs
                guard let frame = try reader.next(idleTimeoutMs: idle, frameTimeoutMs: configuration.frameTimeoutMs) else { return }
                payload = frame
            } catch {
                switch error {
                case .closed: logger.info("client \(caller) disconnected mid-frame")
                case .timedOut: logger.info("closing connection of \(caller): \(error)")
                default: logger.warning("closing connection of \(caller): \(error)")
                }
                return
            }
            busyPoll.requestStarted(&pace, at: MonotonicClock.nanoseconds())
            defer { busyPoll.requestFinished(&pace, at: MonotonicClock.nanoseconds()) }
            if executor.identifiesByExecutable, !(bridge?.bridgeUnchanged() ?? process?.stillRuns(caller.executable) ?? false) {
                logger.warning("closing the connection of \(caller): its process no longer runs \(caller.executable ?? "the executable it connected with")")
                try? socket.writeAll(WireCodec.frame(Response(error: KeychainError(
                    .missingEntitlement, "the process that opened this connection no longer runs the executable it connected with; connect again"))))
                return
            }
            let response: Response
            do throws(KeychainError) {
                let request = try WireCodec.decodeRequest(payload)
                let emit = { (page: Response) in (try? socket.writeAll(WireCodec.frame(page))) != nil }
                switch request {
                case .asCaller(let pid, let startTime, let inner):
                    switch delegate(inner, pid: pid, startTime: startTime, bridge: bridge, connection: caller) {
                    case .run(let inner, let delegated, let bridgePID):
                        response = executor.submit(inner, from: delegated, bridgePID: bridgePID, emit: emit)
                    case .refused(let refusal, let closing):
                        executor.audit(refused: request, from: caller, response: refusal)
                        logger.info("asCaller from \(caller) refused: \(refusal.message)")
                        if closing {
                            try? socket.writeAll(WireCodec.frame(refusal))
                            return
                        }
                        response = refusal
                    }
                case .changeSubscribe:
                    serveNotices(socket, caller, process, bridge: bridge)
                    return
                case .portalSecret:
                    response = Response(error: KeychainError(.missingEntitlement, "portal secrets are given only to the desktop portal, through the Secret Service bridge (asCaller)"))
                    executor.audit(refused: request, from: caller, response: response)
                default:
                    response = executor.submit(request, from: caller, connection: connection, emit: emit)
                }
                if response.status != 0 {
                    logger.debug("\(request.operation) from \(caller): \(response.status)")
                }
            } catch {
                logger.warning("bad request from \(caller): \(error)")
                response = Response(error: error)
            }
            do {
                try socket.writeAll(WireCodec.frame(response))
            } catch {
                logger.info("cannot answer \(caller): \(error)")
                return
            }
        }
    }
}
