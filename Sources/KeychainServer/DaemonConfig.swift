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
    /// nil: an eighth of max_connections.
    public var maxConnectionsPerUID: Int?
    public var busyPollMicroseconds = 50
    public var argon2 = Argon2Parameters.standard
    public var adminUIDs: [UInt32]?
    public var logLevel = "info"
    public var lockGraceSeconds = 10
    public var autoLockSeconds = 0
    public var eraseAfterFailures = 0
    /// [[app]] entries, in file order; empty: the built-in `owner` application.
    public var applications: [Application] = []
    public var unknownCallers = UnknownCallers.refuse
    /// A file of JSON lines, one per call; nil: no audit log.
    public var auditLogPath: String?
    /// Whether audit lines carry service, account and server values.
    public var auditIncludeNames = false

    public init() {}

    public struct ParseError: Error, CustomStringConvertible {
        public let line: Int
        public let message: String
        public var description: String { "line \(line): \(message)" }
    }

    public static func parse(_ text: String) throws(ParseError) -> DaemonConfig {
        var config = DaemonConfig()
        var seen: Set<String> = []
        var app: AppEntry?
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let n = index + 1
            let line = stripComment(String(raw)).trimmed
            if line.isEmpty { continue }
            if line.hasPrefix("[") {
                guard line == "[[app]]" else {
                    throw ParseError(line: n, message: "unknown section \(line); the only section is [[app]]")
                }
                if let done = app { config.applications.append(try done.validated(among: config.applications)) }
                app = AppEntry(line: n)
                continue
            }
            guard let eq = line.firstIndex(of: "=") else {
                throw ParseError(line: n, message: "expected `key = value`")
            }
            let key = String(line[..<eq]).trimmed
            let value = try parseValue(String(line[line.index(after: eq)...]).trimmed, line: n)
            if app != nil {
                try app!.apply(key, value, line: n)
                continue
            }
            guard seen.insert(key).inserted else { throw ParseError(line: n, message: "\(key) is set twice") }
            try config.apply(key, value, line: n)
        }
        if let done = app { config.applications.append(try done.validated(among: config.applications)) }
        return config
    }

    /// One [[app]] table as it is read.
    struct AppEntry {
        let line: Int
        var id: String?
        var uids: Set<UInt32> = []
        var executables: Set<String> = []
        var groups: [String]?
        var seen: Set<String> = []

        init(line: Int) { self.line = line }

        mutating func apply(_ key: String, _ value: ConfigValue, line n: Int) throws(ParseError) {
            guard seen.insert(key).inserted else { throw ParseError(line: n, message: "\(key) is set twice in this [[app]]") }
            func strings() throws(ParseError) -> [String] {
                guard case .array(let items) = value else { throw ParseError(line: n, message: "\(key) must be an array of strings") }
                return try items.map { (item) throws(ParseError) -> String in
                    guard case .string(let s) = item, !s.isEmpty else {
                        throw ParseError(line: n, message: "\(key) must hold non-empty strings")
                    }
                    return s
                }
            }
            switch key {
            case "id":
                guard case .string(let s) = value, !s.isEmpty else { throw ParseError(line: n, message: "id must be a non-empty string") }
                id = s
            case "uids":
                guard case .array(let items) = value else { throw ParseError(line: n, message: "uids must be an array of uids") }
                for item in items {
                    guard case .int(let i) = item, i >= 0, i <= Int(UInt32.max) else {
                        throw ParseError(line: n, message: "uids must hold non-negative integers")
                    }
                    uids.insert(UInt32(i))
                }
            case "users":
                for name in try strings() {
                    guard let pw = getpwnam(name) else { throw ParseError(line: n, message: "no such user \(name)") }
                    uids.insert(pw.pointee.pw_uid)
                }
            case "executables":
                let paths = try strings()
                if let bad = paths.first(where: { !$0.hasPrefix("/") }) {
                    throw ParseError(line: n, message: "executables must be absolute paths (\(bad) is not)")
                }
                executables.formUnion(paths)
            case "groups":
                let list = try strings()
                guard !list.isEmpty else { throw ParseError(line: n, message: "groups must list at least one access group") }
                guard Set(list).count == list.count else { throw ParseError(line: n, message: "groups lists a group twice") }
                groups = list
            default:
                throw ParseError(line: n, message: "unknown key \(key) in [[app]] (id, uids, users, executables, groups)")
            }
        }

        func validated(among earlier: [Application]) throws(ParseError) -> Application {
            guard let id else { throw ParseError(line: line, message: "this [[app]] has no id") }
            guard !earlier.contains(where: { $0.id == id }) else {
                throw ParseError(line: line, message: "app id \(id) is used twice")
            }
            guard !uids.isEmpty else { throw ParseError(line: line, message: "app \(id) names no uids or users") }
            guard let groups else { throw ParseError(line: line, message: "app \(id) has no groups (an empty group list is not allowed)") }
            return Application(id: id, uids: uids, executables: executables, groups: groups)
        }
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
        case "max_connections_per_uid": maxConnectionsPerUID = try int(1...65_536)
        case "busy_poll_microseconds": busyPollMicroseconds = try int(0...1_000)
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
        case "unknown_callers":
            guard let policy = UnknownCallers(rawValue: try string()) else {
                throw ParseError(line: n, message: "unknown_callers must be \"refuse\" or \"private-group\"")
            }
            unknownCallers = policy
        case "audit_log": auditLogPath = try string()
        case "audit_include_names":
            guard case .bool(let b) = value else { throw ParseError(line: n, message: "audit_include_names must be true or false") }
            auditIncludeNames = b
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

    /// The access policy this config describes; `source` names the file in messages.
    public func accessPolicy(source: String) -> AccessPolicy {
        AccessPolicy(applications: applications.isEmpty ? nil : applications, unknownCallers: unknownCallers,
                     adminUIDs: adminUIDs.map(Set.init) ?? [0, getuid()], source: source)
    }

    /// The server configuration: flags win over the file, the file over the defaults.
    public func serverConfiguration(stateDirectory flagState: String?, socket flagSocket: String?,
                                    source: String = "the built-in defaults") -> ServerConfiguration {
        var server = ServerConfiguration(
            socketPath: flagSocket ?? socketPath ?? DefaultPaths.socketPath,
            store: StoreConfiguration(stateDirectory: flagState ?? stateDirectory ?? DefaultPaths.stateDirectory,
                                      argon2: argon2))
        server.idleTimeoutMs = Int32(idleTimeoutSeconds * 1000)
        server.frameTimeoutMs = Int32(frameTimeoutSeconds * 1000)
        server.maxConnections = maxConnections
        server.maxConnectionsPerUID = maxConnectionsPerUID
        server.busyPollMicroseconds = busyPollMicroseconds
        server.socketMode = socketMode
        server.policy = accessPolicy(source: source)
        server.auditLogPath = auditLogPath
        server.auditIncludeNames = auditIncludeNames
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
