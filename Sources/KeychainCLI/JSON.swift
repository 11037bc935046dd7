#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// The CLI's JSON output: objects with sorted keys, no Foundation (it would double the CLI's
/// start-up). Attribute values map as: string → string, int → number, bool → boolean,
/// date → ISO 8601 UTC string, data → base64 string (docs/cli.md lists which keys are data).
enum JSON {
    static func object(_ pairs: [(String, String)]) -> String {
        "{" + pairs.sorted { $0.0 < $1.0 }.map { "\(quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    static func value(_ v: AttributeValue) -> String {
        switch v {
        case .string(let s): quote(s)
        case .data(let d): quote(base64(d))
        case .int(let i): String(i)
        case .bool(let b): b ? "true" : "false"
        case .date(let t): quote(iso8601(t))
        }
    }

    static func attributes(_ dict: AttributeDictionary) -> String {
        object(dict.map { ($0.key, value($0.value)) })
    }

    static func quote(_ s: String) -> String {
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

    static func base64(_ bytes: [UInt8]) -> String {
        let table = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i + 2 < bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], table[Int(n >> 6 & 63)], table[Int(n & 63)]]
            i += 3
        }
        let rest = bytes.count - i
        if rest == 1 {
            let n = UInt32(bytes[i]) << 16
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], 61, 61]
        } else if rest == 2 {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out += [table[Int(n >> 18 & 63)], table[Int(n >> 12 & 63)], table[Int(n >> 6 & 63)], 61]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// CFAbsoluteTime as 2026-11-22T10:00:00Z.
    static func iso8601(_ absolute: Double) -> String {
        var t = time_t((absolute + absoluteTimeIntervalSince1970).rounded(.down))
        var tm = tm()
        gmtime_r(&t, &tm)
        func pad(_ v: Int32, _ w: Int = 2) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, w - s.count)) + s
        }
        return "\(pad(tm.tm_year + 1900, 4))-\(pad(tm.tm_mon + 1))-\(pad(tm.tm_mday))T\(pad(tm.tm_hour)):\(pad(tm.tm_min)):\(pad(tm.tm_sec))Z"
    }
}
