import Logging

/// One log line per event, whatever a caller sends: attribute names in error messages and
/// executable paths are the caller's choice, and a newline in one would forge a line. Every
/// control character (C0, DEL, C1, and the Unicode line and paragraph separators) is shown
/// escaped instead.
enum LogText {
    static func escape(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: isControl) else { return s }
        var out = ""
        out.reserveCapacity(s.utf8.count + 8)
        for u in s.unicodeScalars {
            switch u {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\\": out += "\\\\"
            case _ where isControl(u): out += "\\u{\(String(u.value, radix: 16))}"
            default: out.unicodeScalars.append(u)
            }
        }
        return out
    }

    static func isControl(_ u: Unicode.Scalar) -> Bool {
        u.value < 0x20 || (0x7F...0x9F).contains(u.value) || u.value == 0x2028 || u.value == 0x2029
    }

    static func escape(_ value: Logger.MetadataValue) -> Logger.MetadataValue {
        switch value {
        case .string(let s): .string(escape(s))
        case .stringConvertible(let c): .string(escape(c.description))
        case .array(let a): .array(a.map(escape))
        case .dictionary(let d): .dictionary(d.mapValues(escape))
        }
    }
}

/// A LogHandler that escapes control characters in every message and metadata value before
/// its inner handler writes them: the one place where the daemon's log lines are made safe, so
/// no call site has to remember it.
public struct EscapingLogHandler: LogHandler {
    private var inner: any LogHandler

    public init(_ inner: any LogHandler) { self.inner = inner }

    public func log(event: LogEvent) {
        var event = event
        event.message = Logger.Message(stringLiteral: LogText.escape(event.message.description))
        event.metadata = event.metadata?.mapValues(LogText.escape)
        inner.log(event: event)
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    public var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }
}
