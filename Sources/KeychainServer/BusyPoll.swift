import KeychainProtocol
import Synchronization

/// Whether a connection's thread may watch its socket for the client's next request for a
/// short window, rather than sleep in recv.
///
/// Why: on the virtual machines this runs on, an idle vCPU halts, and waking it for a
/// request costs about as much as serving a get (docs/performance.md). A client that calls
/// back to back (a loop of gets, a build fetching many tokens) finds the thread awake.
///
/// The CPU time is bounded: only a connection whose client came back within the window after
/// its last answer watches (an isolated call never does); only while it is the one connection
/// the daemon has heard from lately (with several busy clients the CPUs have real work, and
/// watching would take it from them); one connection at a time; and it stops as soon as any
/// other connection has a request to serve.
final class BusyPoll: Sendable {
    let windowNs: UInt64
    /// Connections serving a request now.
    private let serving = Atomic<Int>(0)
    /// Connections watching now (0 or 1).
    private let watching = Atomic<Int>(0)
    /// Which connection started the latest request, and when (a heuristic: the two are not
    /// updated together, and a rare mix-up costs one watch more or less).
    private let lastStarter = Atomic<Int>(-1)
    private let lastStartNs = Atomic<UInt64>(0)
    /// Another connection that started a request less than this long ago counts as busy.
    static let othersQuietNs: UInt64 = 2_000_000

    init(windowMicroseconds: Int) {
        windowNs = UInt64(max(0, windowMicroseconds)) * 1000
    }

    func requestStarted(_ pace: inout ConnectionPace, at now: UInt64) {
        serving.add(1, ordering: .relaxed)
        pace.requestArrived(at: now)
        lastStarter.store(pace.connection, ordering: .relaxed)
        lastStartNs.store(now, ordering: .relaxed)
    }

    func requestFinished(_ pace: inout ConnectionPace, at now: UInt64) {
        pace.answered(at: now)
        serving.subtract(1, ordering: .relaxed)
    }

    /// Watches `reader` for the next request if this connection may (`beginWatching`).
    /// Returns when data has arrived or watching stopped; the caller then reads as usual.
    func watch(_ reader: FrameReader, pace: ConnectionPace) {
        guard beginWatching(pace: pace, at: MonotonicClock.nanoseconds()) else { return }
        defer { endWatching() }
        _ = reader.watch(forNs: windowNs) { serving.load(ordering: .relaxed) == 0 }
    }

    /// Claims the one watching slot, if this connection should watch at all.
    func beginWatching(pace: ConnectionPace, at now: UInt64) -> Bool {
        guard windowNs > 0, pace.backToBack(windowNs: windowNs),
              serving.load(ordering: .relaxed) == 0 else { return false }
        if lastStarter.load(ordering: .relaxed) != pace.connection
            && now &- lastStartNs.load(ordering: .relaxed) < Self.othersQuietNs {
            return false
        }
        return watching.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged
    }

    func endWatching() { watching.store(0, ordering: .releasing) }
}

/// How quickly one connection's client comes back after an answer.
struct ConnectionPace {
    /// Tells this connection's requests from others' (the socket's descriptor).
    let connection: Int
    private var answeredAt: UInt64 = 0
    /// Nanoseconds between the last answer and the request after it.
    private var lastGap: UInt64 = .max

    init(connection: Int) { self.connection = connection }

    mutating func requestArrived(at now: UInt64) {
        lastGap = answeredAt == 0 ? .max : now &- answeredAt
    }

    mutating func answered(at now: UInt64) { answeredAt = now }

    func backToBack(windowNs: UInt64) -> Bool { lastGap < windowNs }
}
