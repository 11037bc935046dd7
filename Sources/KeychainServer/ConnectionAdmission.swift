#if canImport(Glibc)
import Glibc
#endif

/// Who may hold a connection, decided at accept from the kernel's uid and the access policy,
/// so that no uid (above all one the policy refuses) can take the slots the others need
/// (docs/security.md, "Fair service"). A value kept under the server's lock: `admit` on accept,
/// `release` when the connection ends.
struct ConnectionAdmission: Sendable, Equatable {
    /// Connections served at once, all uids together.
    let maxConnections: Int
    /// Connections one uid may hold at once.
    let maxPerUID: Int
    /// uids the per-uid limit does not apply to: root and the daemon's own, which could stop
    /// or replace the daemon anyway (a per-user daemon serves only its own uid).
    let unlimited: Set<UInt32>
    /// Connections of refused callers at once: each is answered once and closed, so a few
    /// suffice; they cannot crowd out the callers the policy admits.
    let maxRefused: Int

    private(set) var open = 0
    private(set) var refusedOpen = 0
    private var perUID: [UInt32: Int] = [:]

    enum Decision: Equatable {
        case admit
        /// The uid already holds `maxPerUID` connections.
        case overUIDLimit
        /// `maxConnections` are open.
        case full
        /// `maxRefused` connections of refused callers are open.
        case tooManyRefused
    }

    init(maxConnections: Int, maxPerUID: Int, unlimited: Set<UInt32> = [0, getuid()]) {
        self.maxConnections = maxConnections
        self.maxPerUID = max(1, min(maxPerUID, maxConnections))
        self.unlimited = unlimited
        maxRefused = max(1, maxConnections / 16)
    }

    /// The default per-uid limit: an eighth of all slots, so at least eight uids always fit.
    static func defaultPerUID(maxConnections: Int) -> Int { max(1, maxConnections / 8) }

    mutating func admit(uid: UInt32, refused: Bool) -> Decision {
        if perUID[uid, default: 0] >= maxPerUID && !unlimited.contains(uid) { return .overUIDLimit }
        if refused && refusedOpen >= maxRefused { return .tooManyRefused }
        if open >= maxConnections { return .full }
        perUID[uid, default: 0] += 1
        open += 1
        if refused { refusedOpen += 1 }
        return .admit
    }

    mutating func release(uid: UInt32, refused: Bool) {
        open -= 1
        if refused { refusedOpen -= 1 }
        let left = perUID[uid, default: 1] - 1
        perUID[uid] = left > 0 ? left : nil
    }
}

/// Refused connections, logged as one line for the first and then one summary line per
/// interval, rather than one line each: a flood of refusals must not become a flood of log
/// lines (or of disk writes).
struct RefusalLog: Sendable {
    let interval: Double
    private var windowStart: Double?
    private var counts: [String: Int] = [:]

    init(interval: Double = 10) { self.interval = interval }

    /// Counts a refusal; returns a line to log: the first refusal of a quiet period at once,
    /// later ones summed up once the interval has passed.
    mutating func note(_ reason: String, at now: Double) -> String? {
        guard windowStart != nil else {
            windowStart = now
            return "refused a connection: \(reason) (further refusals are summed up every \(Int(interval)) s)"
        }
        counts[reason, default: 0] += 1
        return tick(at: now)
    }

    /// The summary of the refusals since the last line, once the interval has passed (called
    /// on every accept, so a burst that stops is still reported).
    mutating func tick(at now: Double) -> String? {
        guard let start = windowStart, now - start >= interval else { return nil }
        guard !counts.isEmpty else {
            windowStart = nil  // quiet: the next refusal is logged at once again
            return nil
        }
        windowStart = now
        return summary()
    }

    /// Everything counted and not yet logged (at shutdown).
    mutating func flush() -> String? {
        defer { windowStart = nil }
        return counts.isEmpty ? nil : summary()
    }

    private mutating func summary() -> String {
        defer { counts = [:] }
        let total = counts.values.reduce(0, +)
        let parts = counts.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { "\($0.value)× \($0.key)" }
        return "refused \(total) more connection(s) in the last \(Int(interval)) s: " + parts.joined(separator: "; ")
    }
}
