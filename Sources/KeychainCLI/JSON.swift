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

    /// An attributes object, written straight into wiped memory: v_Data's base64 is the
    /// secret itself, and a String holding it could not be wiped.
    static func attributes(_ dict: AttributeDictionary) -> SecretBytes {
        var w = ByteWriter(capacity: 256)
        write(dict, into: &w)
        return w.finish()
    }

    /// A JSON array of attribute objects, in wiped memory.
    static func array(_ rows: [AttributeDictionary]) -> SecretBytes {
        var w = ByteWriter(capacity: 256 * rows.count + 2)
        w.raw("[".utf8)
        for (i, row) in rows.enumerated() {
            if i > 0 { w.raw(",".utf8) }
            write(row, into: &w)
        }
        w.raw("]".utf8)
        return w.finish()
    }

    private static func write(_ dict: AttributeDictionary, into w: inout ByteWriter) {
        w.raw("{".utf8)
        for (i, (key, v)) in dict.sorted(by: { $0.key < $1.key }).enumerated() {
            if i > 0 { w.raw(",".utf8) }
            w.raw(quote(key).utf8)
            w.raw(":".utf8)
            if case .data(let d) = v {
                w.raw("\"".utf8)
                base64(d, into: &w)
                w.raw("\"".utf8)
            } else {
                w.raw(value(v).utf8)
            }
        }
        w.raw("}".utf8)
    }

    static func quote(_ s: String) -> String { JSONText.quote(s) }

    /// Base64 of bytes that are not secret (lookup attributes in a table).
    static func base64<C: Collection>(_ bytes: C) -> String where C.Element == UInt8, C.Index == Int {
        var w = ByteWriter(capacity: (bytes.count + 2) / 3 * 4)
        base64(bytes, into: &w)
        return String(decoding: w.bytes, as: UTF8.self)
    }

    static func base64<C: Collection>(_ bytes: C, into w: inout ByteWriter) where C.Element == UInt8, C.Index == Int {
        let table: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        let t = UnsafeBufferPointer(start: table.utf8Start, count: 64)
        var i = 0
        while i + 2 < bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            w.u8(t[Int(n >> 18 & 63)]); w.u8(t[Int(n >> 12 & 63)]); w.u8(t[Int(n >> 6 & 63)]); w.u8(t[Int(n & 63)])
            i += 3
        }
        let rest = bytes.count - i
        if rest == 1 {
            let n = UInt32(bytes[i]) << 16
            w.u8(t[Int(n >> 18 & 63)]); w.u8(t[Int(n >> 12 & 63)]); w.u8(61); w.u8(61)
        } else if rest == 2 {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            w.u8(t[Int(n >> 18 & 63)]); w.u8(t[Int(n >> 12 & 63)]); w.u8(t[Int(n >> 6 & 63)]); w.u8(61)
        }
    }

    /// CFAbsoluteTime as 2026-11-22T10:00:00Z.
    static func iso8601(_ absolute: Double) -> String {
        JSONText.iso8601(unix: absolute + absoluteTimeIntervalSince1970)
    }
}
