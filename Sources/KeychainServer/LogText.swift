#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import Logging
import Synchronization

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

/// journald's stream: systemd connects a service's stderr to it and names that stream in
/// JOURNAL_STREAM as "DEVICE:INODE", so a process can tell whether its stderr still goes there
/// (not, say, redirected by whoever started it with the variable inherited).
public enum JournalStream {
    public static func isConnected(_ fd: Int32 = STDERR_FILENO, environment: [String: String]) -> Bool {
        guard let value = environment["JOURNAL_STREAM"] else { return false }
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        return UInt64(st.st_dev) == device && UInt64(st.st_ino) == inode
    }
}

/// Log lines for journald: each starts with its syslog priority ("<6>" for info), which the
/// journal reads and removes, and carries no timestamp (the journal stamps every line itself).
public struct JournalLogHandler: LogHandler {
    public let label: String
    private let fd: Int32
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?

    /// Lines from several threads must not interleave within one another.
    private static let writing = Mutex(())

    public init(label: String, fd: Int32 = STDERR_FILENO) {
        self.label = label
        self.fd = fd
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// syslog's priorities (sd-daemon.h's SD_DEBUG...SD_CRIT): swift-log's trace has none of its own.
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    public static func line(priority: Int, label: String, metadata: Logger.Metadata, message: String) -> String {
        let fields = metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return "<\(priority)>\(label):" + (fields.isEmpty ? "" : " " + fields.joined(separator: " ")) + " \(message)\n"
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { $1 } }
        if let explicit = event.metadata { all.merge(explicit) { $1 } }
        let text = Self.line(priority: Self.priority(event.level), label: label, metadata: all,
                             message: event.message.description)
        Self.writing.withLock { _ in
            var bytes = Array(text.utf8)
            _ = bytes.withUnsafeMutableBytes { b in try? SystemCall.writeAll(fd, UnsafeRawBufferPointer(b)) }
        }
    }
}
