#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore

/// A value in the config file: the TOML subset keychaind reads (strings, integers, booleans,
/// arrays of those; `#` comments; `[section]` headers are not used yet).
public enum ConfigValue: Sendable, Equatable {
    case string(String)
    case int(Int)
    case bool(Bool)
    case array([ConfigValue])
}

/// The config file (Config/keychaind.toml documents every key). Unknown keys, wrong types and
/// malformed lines stop the daemon with the line number.
public struct DaemonConfig: Sendable, Equatable {
    public var stateDirectory: String?
    public var socketPath: String?
    public var socketMode: mode_t = 0o600
    public var idleTimeoutSeconds = 300
    public var frameTimeoutSeconds = 10
    public var maxConnections = 256
    public var argon2 = Argon2Parameters.standard
    public var adminUIDs: [UInt32]?
    public var logLevel = "info"
    public var lockGraceSeconds = 10
    public var autoLockSeconds = 0
    public var eraseAfterFailures = 0

    public init() {}

    public struct ParseError: Error, CustomStringConvertible {
        public let line: Int
        public let message: String
        public var description: String { "line \(line): \(message)" }
    }

    public static func parse(_ text: String) throws(ParseError) -> DaemonConfig {
        var config = DaemonConfig()
        var seen: Set<String> = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let n = index + 1
            let line = stripComment(String(raw)).trimmed
            if line.isEmpty { continue }
            guard let eq = line.firstIndex(of: "=") else {
                throw ParseError(line: n, message: "expected `key = value`")
            }
            let key = String(line[..<eq]).trimmed
            let value = try parseValue(String(line[line.index(after: eq)...]).trimmed, line: n)
            guard seen.insert(key).inserted else { throw ParseError(line: n, message: "\(key) is set twice") }
            try config.apply(key, value, line: n)
        }
        return config
    }

    private mutating func apply(_ key: String, _ value: ConfigValue, line n: Int) throws(ParseError) {
        func string() throws(ParseError) -> String {
            guard case .string(let s) = value else { throw ParseError(line: n, message: "\(key) must be a string") }
            return s
        }
        func int(_ range: ClosedRange<Int>) throws(ParseError) -> Int {
            guard case .int(let i) = value, range.contains(i) else {
                throw ParseError(line: n, message: "\(key) must be an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return i
        }
        switch key {
        case "state_dir": stateDirectory = try string()
        case "socket": socketPath = try string()
        case "socket_mode":
            guard let mode = mode_t(try string(), radix: 8), mode & ~0o777 == 0 else {
                throw ParseError(line: n, message: "socket_mode must be an octal string such as \"0600\"")
            }
            socketMode = mode
        case "idle_timeout_seconds": idleTimeoutSeconds = try int(1...86_400)
        case "frame_timeout_seconds": frameTimeoutSeconds = try int(1...3_600)
        case "max_connections": maxConnections = try int(1...65_536)
        case "argon2_ops": argon2.opsLimit = UInt64(try int(1...64))
        case "argon2_memory_mib": argon2.memLimitBytes = try int(1...4096) << 20
        case "admin_uids":
            guard case .array(let items) = value else { throw ParseError(line: n, message: "admin_uids must be an array of uids") }
            adminUIDs = try items.map { (item) throws(ParseError) -> UInt32 in
                guard case .int(let i) = item, i >= 0, i <= Int(UInt32.max) else {
                    throw ParseError(line: n, message: "admin_uids must hold non-negative integers")
                }
                return UInt32(i)
            }
        case "lock_grace_seconds": lockGraceSeconds = try int(0...3_600)
        case "auto_lock_seconds": autoLockSeconds = try int(0...604_800)
        case "erase_after_failures": eraseAfterFailures = try int(0...1_000)
        case "log_level":
            let level = try string()
            guard ["trace", "debug", "info", "notice", "warning", "error", "critical"].contains(level) else {
                throw ParseError(line: n, message: "log_level must be one of trace, debug, info, notice, warning, error, critical")
            }
            logLevel = level
        default:
            throw ParseError(line: n, message: "unknown key \(key)")
        }
    }

    private static func stripComment(_ line: String) -> String {
        var inString = false
        var out = ""
        for c in line {
            if c == "\"" { inString.toggle() }
            if c == "#" && !inString { break }
            out.append(c)
        }
        return out
    }

    static func parseValue(_ text: String, line n: Int) throws(ParseError) -> ConfigValue {
        if text.hasPrefix("\"") {
            guard text.count >= 2, text.hasSuffix("\"") else { throw ParseError(line: n, message: "unterminated string") }
            let inner = String(text.dropFirst().dropLast())
            guard !inner.contains("\"") && !inner.contains("\\") else {
                throw ParseError(line: n, message: "strings may not contain quotes or backslashes")
            }
            return .string(inner)
        }
        if text.hasPrefix("[") {
            guard text.hasSuffix("]") else { throw ParseError(line: n, message: "unterminated array") }
            let inner = String(text.dropFirst().dropLast()).trimmed
            if inner.isEmpty { return .array([]) }
            return .array(try inner.split(separator: ",").map { (part) throws(ParseError) -> ConfigValue in
                try parseValue(String(part).trimmed, line: n)
            })
        }
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        if let i = Int(text.replacingUnderscores) { return .int(i) }
        throw ParseError(line: n, message: "cannot read value `\(text)`")
    }

    /// The server configuration: flags win over the file, the file over the defaults.
    public func serverConfiguration(stateDirectory flagState: String?, socket flagSocket: String?) -> ServerConfiguration {
        var server = ServerConfiguration(
            socketPath: flagSocket ?? socketPath ?? DefaultPaths.socketPath,
            store: StoreConfiguration(stateDirectory: flagState ?? stateDirectory ?? DefaultPaths.stateDirectory,
                                      argon2: argon2))
        server.idleTimeoutMs = Int32(idleTimeoutSeconds * 1000)
        server.frameTimeoutMs = Int32(frameTimeoutSeconds * 1000)
        server.maxConnections = maxConnections
        server.socketMode = socketMode
        if let adminUIDs { server.policy = AccessPolicy(adminUIDs: Set(adminUIDs)) }
        server.lockPolicy.gracePeriod = Double(lockGraceSeconds)
        server.lockPolicy.autoLockAfter = Double(autoLockSeconds)
        server.lockPolicy.eraseAfterFailures = eraseAfterFailures
        return server
    }
}

extension String {
    var trimmed: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" || f == "\r" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" || l == "\r" { s = s.dropLast() }
        return String(s)
    }

    var replacingUnderscores: String { String(filter { $0 != "_" }) }
}
