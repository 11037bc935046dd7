import KeychainProtocol
import Synchronization

/// Whether a connection's thread may watch its socket for the client's next request for a
/// short window, rather than sleep in recv.
///
/// Why: on the virtual machines this runs on, an idle vCPU halts, and waking it for a
/// request costs more than serving a get (a status round trip: 22 µs with the daemon's thread
/// asleep, 14 µs with it watching; docs/performance.md). A client that calls back to back
/// (a loop of gets, a build fetching many tokens) finds the thread awake.
///
/// The CPU time is bounded: only a connection whose client answered the last response within
/// the window watches (an isolated call never does), only one connection watches at a time,
/// and it stops as soon as any other connection has a request to serve, so watching never
/// takes a CPU that real work needs.
final class BusyPoll: Sendable {
    let windowNs: UInt64
    /// Connections serving a request now.
    private let serving = Atomic<Int>(0)
    /// Connections watching now (0 or 1).
    private let watching = Atomic<Int>(0)

    init(windowMicroseconds: Int) {
        windowNs = UInt64(max(0, windowMicroseconds)) * 1000
    }

    func requestStarted() { serving.add(1, ordering: .relaxed) }
    func requestFinished() { serving.subtract(1, ordering: .relaxed) }

    /// Watches `reader` for the next request if `pace` says the client calls back to back and
    /// the daemon has nothing else to do. Returns when data has arrived or watching stopped;
    /// the caller then reads as usual.
    func watch(_ reader: FrameReader, pace: ConnectionPace) throws(SocketFailure) {
        guard beginWatching(pace: pace) else { return }
        defer { endWatching() }
        _ = try reader.watch(forNs: windowNs) { serving.load(ordering: .relaxed) == 0 }
    }

    /// Claims the one watching slot, if this connection should watch at all.
    func beginWatching(pace: ConnectionPace) -> Bool {
        windowNs > 0 && pace.backToBack(windowNs: windowNs)
            && serving.load(ordering: .relaxed) == 0
            && watching.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    }

    func endWatching() { watching.store(0, ordering: .releasing) }
}

/// How quickly one connection's client comes back after an answer.
struct ConnectionPace {
    private var answeredAt: UInt64 = 0
    /// Nanoseconds between the last answer and the request after it.
    private var lastGap: UInt64 = .max

    mutating func requestArrived(at now: UInt64) {
        lastGap = answeredAt == 0 ? .max : now &- answeredAt
    }

    mutating func answered(at now: UInt64) { answeredAt = now }

    func backToBack(windowNs: UInt64) -> Bool { lastGap < windowNs }
}
