/// One attribute value as it travels between caller and store: the Linux stand-in for the
/// CoreFoundation types that SecItem dictionaries hold (CFString, CFData, CFNumber,
/// CFBoolean, CFDate). Dates are CFAbsoluteTime: seconds since 2001-01-01 00:00:00 UTC.
public enum AttributeValue: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    /// Any data value; secrets (v_Data) among them, so all are kept in wiped memory.
    case data(SecretBytes)
    case int(Int64)
    case bool(Bool)
    case date(Double)

    /// A data value copied from ordinary bytes (literals, non-secret attributes, tests).
    public static func data(_ bytes: [UInt8]) -> AttributeValue { .data(SecretBytes(bytes)) }

    public var description: String {
        // Deliberately value-free for data: descriptions end up in logs and error messages.
        switch self {
        case .string(let s): "string(\(s.utf8.count) bytes)"
        case .data(let d): "data(\(d.count) bytes)"
        case .int(let i): "int(\(i))"
        case .bool(let b): "bool(\(b))"
        case .date(let d): "date(\(d))"
        }
    }

    public var typeName: String {
        switch self {
        case .string: "string"
        case .data: "data"
        case .int: "number"
        case .bool: "boolean"
        case .date: "date"
        }
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var bytesValue: SecretBytes? {
        switch self {
        case .data(let d): d
        case .string(let s): SecretBytes(s.utf8)
        default: nil
        }
    }
}

/// Seconds between the Unix epoch and CoreFoundation's reference date (2001-01-01 UTC).
public let absoluteTimeIntervalSince1970: Double = 978_307_200

/// A SecItem-style dictionary: Apple's short keys ("class", "acct", "v_Data", "m_Limit"...)
/// to values.
public typealias AttributeDictionary = [String: AttributeValue]
