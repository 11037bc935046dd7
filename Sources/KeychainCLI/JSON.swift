#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// The CLI's JSON output: objects with sorted keys, no Foundation (it would double the CLI's
/// start-up). Attribute values map as: string → string, int → number, bool → boolean,
/// date → ISO 8601 UTC string, data → base64 string (docs/cli.md lists which keys are data).
enum JSON {
    static func object(_ pairs: [(String, String)]) -> String { JSONText.object(pairs) }

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

    static func quote(_ s: String) -> String { JSONText.quote(s) }

    static func base64<C: Collection>(_ bytes: C) -> String where C.Element == UInt8, C.Index == Int {
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
        JSONText.iso8601(unix: absolute + absoluteTimeIntervalSince1970)
    }
}
