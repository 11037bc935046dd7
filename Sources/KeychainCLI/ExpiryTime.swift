#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// `--expires`: a lifetime from now (`90s`, `30m`, `1h`, `7d`) or a UTC time
/// (`2026-12-31`, `2026-12-31T00:00Z`, `2026-12-31T00:00:00Z`), as the CFAbsoluteTime of `expd`.
enum ExpiryTime {
    static let help = "Expiry: a lifetime (90s, 30m, 1h, 7d) or a UTC time (2026-12-31T00:00Z); past it the item is never returned and is deleted."

    static func parse(_ text: String, now unixNow: Double) throws(UsageError) -> AttributeValue {
        let unix: Double
        if let seconds = lifetime(text) {
            unix = unixNow + seconds
        } else if let time = utc(text) {
            unix = time
        } else {
            throw UsageError(message: "--expires \(text): give a lifetime (90s, 30m, 1h, 7d) or a UTC time (2026-12-31T00:00Z)")
        }
        guard unix > unixNow else { throw UsageError(message: "--expires \(text) is already past") }
        return .date(unix - absoluteTimeIntervalSince1970)
    }

    /// `N` followed by s, m, h, d or w; nil for anything else.
    static func lifetime(_ text: String) -> Double? {
        guard let unit = text.last, let n = Int(text.dropLast()), n > 0, n < 100_000_000 else { return nil }
        let scale: Double? = switch unit {
        case "s": 1
        case "m": 60
        case "h": 3_600
        case "d": 86_400
        case "w": 604_800
        default: nil
        }
        return scale.map { Double(n) * $0 }
    }

    /// A date, or a date and time ending in Z, as seconds since 1970; nil when not one.
    static func utc(_ text: String) -> Double? {
        var parts = text.split(separator: "T", omittingEmptySubsequences: false)
        guard parts.count == 1 || parts.count == 2 else { return nil }
        let date = parts.removeFirst().split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        guard date.count == 3, let year = date[0], let month = date[1], let day = date[2],
              (1970...9999).contains(year), (1...12).contains(month), (1...31).contains(day) else { return nil }
        var clock = [0, 0, 0]
        if let time = parts.first {
            guard time.hasSuffix("Z") else { return nil }
            let fields = time.dropLast().split(separator: ":", omittingEmptySubsequences: false).map { Int($0) }
            guard fields.count == 2 || fields.count == 3, !fields.contains(nil) else { return nil }
            for (i, v) in fields.enumerated() { clock[i] = v! }
            guard (0...23).contains(clock[0]), (0...59).contains(clock[1]), (0...59).contains(clock[2]) else { return nil }
        }
        var tm = Glibc.tm()
        tm.tm_year = Int32(year - 1900)
        tm.tm_mon = Int32(month - 1)
        tm.tm_mday = Int32(day)
        tm.tm_hour = Int32(clock[0])
        tm.tm_min = Int32(clock[1])
        tm.tm_sec = Int32(clock[2])
        let seconds = timegm(&tm)
        // timegm normalises 2026-02-31 to March: such a date is refused, not moved.
        guard tm.tm_mday == Int32(day), tm.tm_mon == Int32(month - 1) else { return nil }
        return Double(seconds)
    }

    /// Seconds since 1970, now.
    static func unixNow() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
