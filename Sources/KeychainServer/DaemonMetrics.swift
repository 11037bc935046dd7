import KeychainModel
import KeychainProtocol
import Prometheus
import Synchronization

/// The daemon's metrics in one Prometheus registry, per daemon (not the process-wide
/// MetricsSystem: a test process runs many daemons). Every label value comes from a fixed set
/// (an operation's name, a status's name, a refusal's kind, a lock state): never an attribute,
/// a caller's name or anything a caller chose, so the exposition says how the daemon does and
/// nothing about what it keeps.
final class DaemonMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let connections: Counter
    private let locked: Gauge
    private let outbox: Gauge
    private let syncLag: Gauge
    /// Each answered call's counter and histogram, looked up in the registry once per kind of
    /// call: the registry's own lookup (names and label lists built and compared as strings)
    /// cost 7.6% of keychaind's samples on the bridge's hot path (docs/performance.md). The
    /// keys come from fixed sets (operations, keychaind's statuses, two routes), so it stays small.
    /// A PthreadMutex, as every lock taken on each request: under Swift's Mutex eight clients
    /// spun in its slow path for half the daemon's CPU (docs/performance.md).
    private let calls = PthreadMutex<[CallKey: CallMetrics]>([:])

    private struct CallKey: Hashable {
        let operation: Request.Operation
        let status: Int32
        let viaBridge: Bool
    }

    private struct CallMetrics {
        let count: Counter
        let duration: DurationHistogram
    }

    /// The status key of a code keychaind does not define ("other" in the exposition).
    private static let otherStatus = Int32.min

    /// Latency buckets, seconds: a get is tens of microseconds, an unlock's Argon2id a second.
    static let buckets: [Duration] = [.microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500),
                                      .milliseconds(1), .milliseconds(2.5), .milliseconds(5), .milliseconds(10),
                                      .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250),
                                      .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5)]

    init() {
        connections = registry.makeCounter(descriptor: Self.name("connections", "total", "Connections accepted"))
        locked = registry.makeGauge(descriptor: Self.name("locked", "", "1 while the passcode classes are locked, else 0"))
        outbox = registry.makeGauge(descriptor: Self.name("sync_backlog", "changes", "Local changes queued for the sync circle, not yet pushed"))
        syncLag = registry.makeGauge(descriptor: Self.name("sync_lag", "seconds", "Seconds since the last sync pass that finished (-1: none yet, or sync is off)"))
    }

    static func name(_ metric: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "keychaind", metricName: metric, unitName: unit, helpText: help)
    }

    /// One call answered: its operation, its status and how long it took. `via`: "socket", or
    /// "bridge" for a call the Secret Service bridge made for its D-Bus caller.
    func record(_ request: Request, status: Int32, nanoseconds: Int64, viaBridge: Bool) {
        let key = CallKey(operation: Self.operation(request), status: KeychainStatus(rawValue: status) == nil ? Self.otherStatus : status,
                          viaBridge: viaBridge)
        let handles = calls.withLock { $0[key] } ?? makeHandles(key)
        handles.count.increment()
        handles.duration.recordNanoseconds(nanoseconds)
    }

    private func makeHandles(_ key: CallKey) -> CallMetrics {
        let operation = "\(key.operation)"
        let handles = CallMetrics(
            count: registry.makeCounter(descriptor: Self.name("operations", "total", "Calls answered, by operation and status"),
                                        labels: [("operation", operation), ("status", Self.statusName(key.status)),
                                                 ("via", key.viaBridge ? "bridge" : "socket")]),
            duration: registry.makeDurationHistogram(descriptor: Self.name("operation_duration", "seconds", "Time to answer a call, by operation"),
                                                     labels: [("operation", operation)], buckets: Self.buckets))
        calls.withLock { $0[key] = handles }
        return handles
    }

    func connectionAccepted() { connections.increment() }

    /// A connection or call refused before it ran: `reason` is one of a fixed few
    /// ("policy", "too_many_connections", "too_many_refused", "as_caller").
    func refused(_ reason: String) {
        registry.makeCounter(descriptor: Self.name("refusals", "total", "Connections and calls refused before running, by reason"),
                             labels: [("reason", reason)]).increment()
    }

    /// The text exposition, with the gauges read now.
    func exposition(locked isLocked: Bool, outboxEntries: Int?, secondsSinceSync: Double?) -> String {
        locked.set(to: isLocked ? 1.0 : 0.0)
        outbox.set(to: Double(outboxEntries ?? 0))
        syncLag.set(to: secondsSinceSync ?? -1)
        return registry.emitToString()
    }

    /// The operation's wire name (`Request.Operation`); an asCaller is named for the call inside.
    static func operationName(_ request: Request) -> String { "\(operation(request))" }

    static func operation(_ request: Request) -> Request.Operation {
        if case .asCaller(_, _, let inner) = request { return operation(inner) }
        return request.operation
    }

    /// The status's OSStatus name; a code keychaind does not define is "other".
    static func statusName(_ status: Int32) -> String {
        KeychainStatus(rawValue: status)?.name ?? "other"
    }
}
