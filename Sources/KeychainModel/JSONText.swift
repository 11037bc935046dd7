#if canImport(Glibc)
import Glibc
#endif

/// The bits of JSON the CLI and the audit log write, without Foundation (it would double the
/// CLI's start-up).
public enum JSONText {
    /// A JSON string literal.
    public static func quote(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if u.value < 0x20 {
                    let hex = String(u.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }

    /// An object with keys sorted; values are JSON already.
    public static func object(_ pairs: [(String, String)]) -> String {
        "{" + pairs.sorted { $0.0 < $1.0 }.map { "\(quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    /// Seconds since 1970 as 2026-11-22T10:00:00Z (with milliseconds when asked).
    public static func iso8601(unix: Double, milliseconds: Bool = false) -> String {
        let whole = unix.rounded(.down)
        var t = time_t(whole)
        var tm = tm()
        gmtime_r(&t, &tm)
        func pad(_ v: Int, _ w: Int = 2) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, w - s.count)) + s
        }
        var text = "\(pad(Int(tm.tm_year) + 1900, 4))-\(pad(Int(tm.tm_mon) + 1))-\(pad(Int(tm.tm_mday)))T"
            + "\(pad(Int(tm.tm_hour))):\(pad(Int(tm.tm_min))):\(pad(Int(tm.tm_sec)))"
        if milliseconds { text += "." + pad(min(999, Int((unix - whole) * 1000)), 3) }
        return text + "Z"
    }
}
