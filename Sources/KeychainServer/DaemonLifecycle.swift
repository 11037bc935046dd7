#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import KeychainModel
import Logging

/// Something from outside that changes what a running daemon does.
public enum LifecycleEvent: Sendable, Equatable {
    /// SIGTERM or SIGINT: stop serving, finish what is in flight, close the store.
    case stop(signal: Int32)
    /// SIGHUP: read the config file again.
    case reload
    /// SIGUSR1: the host's lock event (a session-lock or suspend hook sends it).
    case lock
}

/// Where lifecycle events come from. `next()` blocks until one arrives; nil means none ever
/// will, which stops the daemon. Tests give a scripted list; the daemon gives its signals.
public protocol LifecycleEvents {
    mutating func next() -> LifecycleEvent?
}

/// The process's signals as lifecycle events, taken with sigwait by the thread that asks for
/// the next one: no handler runs in an arbitrary thread at an arbitrary point.
public struct SignalEvents: LifecycleEvents {
    private var watched = sigset_t()

    /// Blocks SIGTERM, SIGINT, SIGHUP and SIGUSR1 in the calling thread. Create it before any
    /// other thread starts: threads inherit the mask, and one that had the signals unblocked
    /// would die of them. A signal that arrives before `next()` waits for it stays pending.
    public init() {
        sigemptyset(&watched)
        for s in [SIGTERM, SIGINT, SIGHUP, SIGUSR1] { sigaddset(&watched, s) }
        pthread_sigmask(SIG_BLOCK, &watched, nil)
    }

    public mutating func next() -> LifecycleEvent? {
        while true {
            var signal: Int32 = 0
            guard sigwait(&watched, &signal) == 0 else { continue }
            switch signal {
            case SIGHUP: return .reload
            case SIGUSR1: return .lock
            default: return .stop(signal: signal)
            }
        }
    }
}

/// The phases a service manager is told about (systemd's READY=1, RELOADING=1, STOPPING=1).
public enum ServicePhase: Sendable, Equatable {
    /// Serving: at start once the store is open and workers accept, and after each reload.
    case ready
    /// A reload has begun; `ready` follows when it is over, whether it worked or not.
    case reloading
    /// Shutting down: no new connections; in-flight calls finish.
    case stopping
}

/// Told each phase as the daemon enters it, from the thread that runs the lifecycle. The
/// readiness hook: a service manager's notification is one of these.
public protocol ReadinessObserver: Sendable {
    func announce(_ phase: ServicePhase)
}

/// What the lifecycle drives: the socket server, or a stand-in in tests.
public protocol LifecycleService: AnyObject {
    /// Begins accepting connections and returns.
    func startServing()
    /// Applies a reloaded config; throws (leaving everything as it was) if it cannot.
    func reload(_ config: DaemonConfig, source: String) throws(KeychainError)
    func lock(reason: String)
    /// Stops accepting; may be called once serving has started.
    func shutdown()
    /// Returns once every in-flight call has finished and the store is closed.
    func waitUntilStopped()
}

/// The daemon from start to stop: starts the service, tells the observers it is ready, then
/// turns each event into a reload, a lock or the shutdown, announcing each phase. Runs on the
/// thread that calls `run` (the main thread), which is also the one that waits for signals.
public struct DaemonLifecycle {
    /// The config file SIGHUP reads: --config or $KEYCHAIND_CONFIG, else the default path,
    /// looked at again on each SIGHUP so that a file written after the start is read.
    let configFile: ConfigFile
    let loadConfig: (String) throws -> DaemonConfig
    let observers: [any ReadinessObserver]
    let logger: Logger
    /// How long a stop waits for in-flight calls and the store's close before it gives up and
    /// returns (the process then exits): a call wedged in a system call must not keep the
    /// daemon past a service manager's stop timeout (systemd's default is 90 s), where it would
    /// be killed without a word in the log. Every committed write is durable before it is
    /// answered, so leaving without the close loses nothing that was acknowledged.
    let stopDeadlineSeconds: Double

    /// The default `stopDeadlineSeconds`.
    public static let defaultStopDeadlineSeconds = 30.0

    public init(configFile: ConfigFile, loadConfig: @escaping (String) throws -> DaemonConfig,
                observers: [any ReadinessObserver], logger: Logger,
                stopDeadlineSeconds: Double = DaemonLifecycle.defaultStopDeadlineSeconds) {
        self.configFile = configFile
        self.loadConfig = loadConfig
        self.observers = observers
        self.logger = logger
        self.stopDeadlineSeconds = stopDeadlineSeconds
    }

    /// Serves until a stop event (or the end of the events), then shuts the service down and
    /// returns once it has stopped.
    public func run(_ service: some LifecycleService, events: inout some LifecycleEvents) {
        service.startServing()
        announce(.ready)
        while let event = events.next() {
            switch event {
            case .reload:
                reload(service)
            case .lock:
                service.lock(reason: "SIGUSR1 from the host")
            case .stop(let signal):
                logger.info("signal \(signal): stopping")
                stop(service)
                return
            }
        }
        logger.notice("no more lifecycle events: stopping")
        stop(service)
    }

    /// A reload is always announced (RELOADING=1, then READY=1): `systemctl reload` waits
    /// for them, also when there is no file to read.
    private func reload(_ service: some LifecycleService) {
        announce(.reloading)
        defer { announce(.ready) }
        guard configFile.shouldRead else {
            logger.notice("SIGHUP: no config file at \(configFile.path); keeping the running config")
            return
        }
        do {
            try service.reload(try loadConfig(configFile.path), source: configFile.path)
        } catch {
            logger.error("config reload failed, keeping the running one: \(error)")
        }
    }

    private func stop(_ service: some LifecycleService) {
        announce(.stopping)
        service.shutdown()
        if !waitUntilStopped(service) {
            logger.error("stop: in-flight calls had not finished after \(stopDeadlineSeconds) s; exiting without waiting for them or closing the store")
        }
    }

    /// Waits for the service to stop, on a thread of its own so that this one can give up at
    /// the deadline; false if it did.
    private func waitUntilStopped(_ service: some LifecycleService) -> Bool {
        let stopped = DispatchSemaphore(value: 0)
        let waiting = ServiceToWaitFor(service: service)
        guard DetachedThread.start({ waiting.service.waitUntilStopped(); stopped.signal() }) else {
            service.waitUntilStopped()  // no thread to spare: wait here, without a deadline
            return true
        }
        return stopped.wait(timeout: .now() + stopDeadlineSeconds) == .success
    }

    private func announce(_ phase: ServicePhase) {
        for observer in observers { observer.announce(phase) }
    }
}

/// The service, handed to the thread that waits for it to stop.
// @unchecked: from the hand-over on, the lifecycle's thread no longer calls the service; the
// waiting thread calls only waitUntilStopped, which the service allows from any thread.
private struct ServiceToWaitFor<Service: LifecycleService>: @unchecked Sendable {
    let service: Service
}
