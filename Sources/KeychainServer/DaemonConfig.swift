#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore
import TOML

/// The config file, in TOML (Config/keychaind.toml documents every key). What is not TOML, unknown
/// keys, a key set twice and wrong types stop the daemon with the line number.
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
    /// nil: by the daemon's uid (SessionEventLocking.default).
    public var lockOnSessionEvents: SessionEventLocking?
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
        /// Where on the line, for errors in the TOML itself; nil for a value the daemon refuses.
        public let column: Int?
        public let message: String

        init(line: Int, column: Int? = nil, message: String) {
            self.line = line
            self.column = column
            self.message = message
        }

        public var description: String {
            column.map { "line \(line), column \($0): \(message)" } ?? "line \(line): \(message)"
        }
    }

    public static func parse(_ text: String) throws(ParseError) -> DaemonConfig {
        let document: TOMLTable
        do {
            document = try TOMLDecoder.decode(text)
        } catch {
            throw ParseError(line: error.line, column: error.column, message: error.message)
        }
        var config = DaemonConfig()
        for entry in document.entries {
            let n = entry.keyPosition.line
            switch (entry.key, entry.value.kind) {
            case ("app", .array(let tables)):
                for table in tables {
                    guard case .table(let settings) = table.kind else {
                        throw ParseError(line: table.position.line, message: "app must be a list of [[app]] tables")
                    }
                    var app = AppEntry(line: table.position.line)
                    for setting in settings.entries {
                        try app.apply(setting.key, setting.value, line: setting.keyPosition.line)
                    }
                    config.applications.append(try app.validated(among: config.applications))
                }
            case ("app", _):
                throw ParseError(line: n, message: "app must be a list of [[app]] tables")
            case (_, .table):
                throw ParseError(line: entry.value.position.line,
                                 message: "unknown section [\(entry.key)]; the only section is [[app]]")
            default:
                try config.apply(entry.key, entry.value, line: n)
            }
        }
        return config
    }

    /// One [[app]] table as it is read.
    struct AppEntry {
        let line: Int
        var id: String?
        var uids: Set<UInt32> = []
        var executables: Set<String> = []
        var groups: [String]?

        init(line: Int) { self.line = line }

        mutating func apply(_ key: String, _ value: TOMLValue, line n: Int) throws(ParseError) {
            func strings() throws(ParseError) -> [String] {
                guard case .array(let items) = value.kind else { throw ParseError(line: n, message: "\(key) must be an array of strings") }
                return try items.map { (item) throws(ParseError) -> String in
                    guard case .string(let s) = item.kind, !s.isEmpty else {
                        throw ParseError(line: item.position.line, message: "\(key) must hold non-empty strings")
                    }
                    return s
                }
            }
            switch key {
            case "id":
                guard case .string(let s) = value.kind, !s.isEmpty else { throw ParseError(line: n, message: "id must be a non-empty string") }
                id = s
            case "uids":
                uids.formUnion(try DaemonConfig.uids(key, value, line: n))
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

    /// An array of uids: the error names the line of the element at fault.
    static func uids(_ key: String, _ value: TOMLValue, line n: Int) throws(ParseError) -> [UInt32] {
        guard case .array(let items) = value.kind else { throw ParseError(line: n, message: "\(key) must be an array of uids") }
        return try items.map { (item) throws(ParseError) -> UInt32 in
            guard case .integer(let i) = item.kind, i >= 0, i <= Int64(UInt32.max) else {
                throw ParseError(line: item.position.line, message: "\(key) must hold non-negative integers")
            }
            return UInt32(i)
        }
    }

    private mutating func apply(_ key: String, _ value: TOMLValue, line n: Int) throws(ParseError) {
        func string() throws(ParseError) -> String {
            guard case .string(let s) = value.kind else { throw ParseError(line: n, message: "\(key) must be a string") }
            return s
        }
        func int(_ range: ClosedRange<Int>) throws(ParseError) -> Int {
            guard case .integer(let wide) = value.kind, let i = Int(exactly: wide), range.contains(i) else {
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
        case "admin_uids": adminUIDs = try DaemonConfig.uids(key, value, line: n)
        case "lock_grace_seconds": lockGraceSeconds = try int(0...3_600)
        case "auto_lock_seconds": autoLockSeconds = try int(0...604_800)
        case "erase_after_failures": eraseAfterFailures = try int(0...1_000)
        case "lock_on_session_events":
            guard let setting = SessionEventLocking(rawValue: try string()) else {
                throw ParseError(line: n, message: "lock_on_session_events must be \"own-sessions\" or \"off\"")
            }
            lockOnSessionEvents = setting
        case "unknown_callers":
            guard let policy = UnknownCallers(rawValue: try string()) else {
                throw ParseError(line: n, message: "unknown_callers must be \"refuse\" or \"private-group\"")
            }
            unknownCallers = policy
        case "audit_log": auditLogPath = try string()
        case "audit_include_names":
            guard case .bool(let b) = value.kind else { throw ParseError(line: n, message: "audit_include_names must be true or false") }
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
