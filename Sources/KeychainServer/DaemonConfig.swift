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
    /// Programs that may speak for their D-Bus callers (asCaller); nil: the built-in list.
    public var bridgeExecutables: [String]?
    /// Programs the bridge may fetch portal secrets for; nil: the built-in list.
    public var portalExecutables: [String]?
    /// `[sync] database`: a libpq conninfo, checked when the file is read (SyncDatabaseSetting);
    /// nil: sync is off and its calls answer errSecNotAvailable.
    public var syncDatabase: String?
    /// `credential_socket`: the socket systemd's LoadCredential= reads items from; nil: none.
    public var credentialSocketPath: String?
    /// `[prompt]`: where the person is asked for items that ask first.
    public var prompt = PromptSettings()
    /// `[metrics]`: the listener that serves a scraper; off unless `listen` is set.
    public var metrics = MetricsSettings()
    /// `[expiry] sweep_seconds`: how often expired items are deleted (reads hide them anyway).
    public var expirySweepSeconds = 300

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

    /// Reads and checks a config file. A file that cannot be read says why (strerror); one
    /// that is not UTF-8 names the line, column and byte, as any other mistake in it does.
    public static func load(path: String) throws(KeychainError) -> DaemonConfig {
        let bytes: [UInt8]
        do {
            bytes = try readFile(path)
        } catch {
            throw error.keychainError("cannot read config file \(path)")
        }
        do {
            return try parse(utf8: bytes)
        } catch {
            throw KeychainError(.param, "\(path): \(error)")
        }
    }

    /// The file's bytes, up to one past the TOML decoder's limit (which it then reports).
    static func readFile(_ path: String) throws(SystemCallError) -> [UInt8] {
        let fd = try SystemCall.open(path, O_RDONLY | O_CLOEXEC)
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: TOMLDecoder.maxBytes + 1)
        let read = bytes.withUnsafeMutableBytes { b in Result { () throws(SystemCallError) in try SystemCall.readFully(fd, into: b) } }
        let count = try read.get()
        bytes.removeSubrange(count...)
        return bytes
    }

    public static func parse(_ text: String) throws(ParseError) -> DaemonConfig {
        try parse(utf8: Array(text.utf8))
    }

    public static func parse(utf8 bytes: [UInt8]) throws(ParseError) -> DaemonConfig {
        let document: TOMLTable
        do {
            document = try TOMLDecoder.decode(utf8: bytes)
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
            case ("sync", .table(let settings)):
                for setting in settings.entries {
                    let line = setting.keyPosition.line
                    guard setting.key == "database" else {
                        throw ParseError(line: line, message: "unknown key \(setting.key) in [sync] (database)")
                    }
                    guard case .string(let conninfo) = setting.value.kind, !conninfo.isEmpty else {
                        throw ParseError(line: line, message: "database in [sync] must be a non-empty libpq conninfo string")
                    }
                    do throws(KeychainError) {
                        try SyncDatabaseSetting.check(conninfo)
                    } catch {
                        throw ParseError(line: line, message: error.message)
                    }
                    config.syncDatabase = conninfo
                }
            case ("prompt", .table(let settings)):
                for setting in settings.entries {
                    try config.prompt.apply(setting.key, setting.value, line: setting.keyPosition.line)
                }
            case ("metrics", .table(let settings)):
                try config.metrics.read(settings, line: entry.value.position.line)
            case ("expiry", .table(let settings)):
                for setting in settings.entries {
                    let line = setting.keyPosition.line
                    guard setting.key == "sweep_seconds" else {
                        throw ParseError(line: line, message: "unknown key \(setting.key) in [expiry] (sweep_seconds)")
                    }
                    guard case .integer(let wide) = setting.value.kind, let seconds = Int(exactly: wide),
                          DaemonConfig.sweepSecondsRange.contains(seconds) else {
                        throw ParseError(line: line, message: "sweep_seconds in [expiry] must be an integer in \(DaemonConfig.sweepSecondsRange.lowerBound)...\(DaemonConfig.sweepSecondsRange.upperBound)")
                    }
                    config.expirySweepSeconds = seconds
                }
            case (_, .table):
                throw ParseError(line: entry.value.position.line,
                                 message: "unknown section [\(entry.key)]; the sections are [[app]], [sync], [prompt], [metrics] and [expiry]")
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
        var units: Set<String> = []
        var userUnits: Set<String> = []
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
            case "units", "user_units":
                let names = try strings()
                if let bad = names.first(where: { !SystemdUnit.isProcessUnit(Substring($0)) || $0.contains("/") }) {
                    throw ParseError(line: n, message: "\(key) must name services or scopes, as \"name.service\" (\(bad) is not one)")
                }
                if key == "units" { units.formUnion(names) } else { userUnits.formUnion(names) }
            case "groups":
                let list = try strings()
                guard !list.isEmpty else { throw ParseError(line: n, message: "groups must list at least one access group") }
                guard Set(list).count == list.count else { throw ParseError(line: n, message: "groups lists a group twice") }
                // Each sandboxed app's portal secret lives in portal.<app id>, that app's alone.
                if let reserved = list.first(where: { $0.hasPrefix(DaemonConfig.portalGroupPrefix) }) {
                    throw ParseError(line: n, message: "group \(reserved) is reserved: groups named \(DaemonConfig.portalGroupPrefix)* hold the desktop portal's per-app secrets")
                }
                groups = list
            default:
                throw ParseError(line: n, message: "unknown key \(key) in [[app]] (id, uids, users, executables, units, user_units, groups)")
            }
        }

        func validated(among earlier: [Application]) throws(ParseError) -> Application {
            guard let id else { throw ParseError(line: line, message: "this [[app]] has no id") }
            guard !earlier.contains(where: { $0.id == id }) else {
                throw ParseError(line: line, message: "app id \(id) is used twice")
            }
            guard !uids.isEmpty || userUnits.isEmpty else {
                throw ParseError(line: line, message: "app \(id) names user_units without uids or users: any user can start a user unit of any name")
            }
            guard !uids.isEmpty || !units.isEmpty else { throw ParseError(line: line, message: "app \(id) names no uids, users or units") }
            guard let groups else { throw ParseError(line: line, message: "app \(id) has no groups (an empty group list is not allowed)") }
            return Application(id: id, uids: uids, executables: executables, units: units, userUnits: userUnits, groups: groups)
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

    /// The prefix of the access groups that hold portal secrets (reserved).
    public static let portalGroupPrefix = "portal."

    /// A list of absolute paths (an empty list is allowed: it turns the feature off).
    static func paths(_ key: String, _ value: TOMLValue, line n: Int) throws(ParseError) -> [String] {
        guard case .array(let items) = value.kind else { throw ParseError(line: n, message: "\(key) must be an array of absolute paths") }
        return try items.map { (item) throws(ParseError) -> String in
            guard case .string(let s) = item.kind, s.hasPrefix("/") else {
                throw ParseError(line: item.position.line, message: "\(key) must hold absolute paths")
            }
            return s
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
        case "credential_socket":
            let path = try string()
            guard path.hasPrefix("/") else { throw ParseError(line: n, message: "credential_socket must be an absolute path") }
            credentialSocketPath = path
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
        case "bridge_executables": bridgeExecutables = try Self.paths(key, value, line: n)
        case "portal_executables": portalExecutables = try Self.paths(key, value, line: n)
        case "audit_log": auditLogPath = try string()
        case "audit_include_names":
            guard case .bool(let b) = value.kind else { throw ParseError(line: n, message: "audit_include_names must be true or false") }
            auditIncludeNames = b
        case "log_level":
            let level = try string()
            guard Self.logLevels.contains(level) else {
                throw ParseError(line: n, message: "log_level must be one of trace, debug, info, notice, warning, error, critical")
            }
            logLevel = level
        default:
            throw ParseError(line: n, message: "unknown key \(key)")
        }
    }

    /// Each sweep opens every item of the unlocked classes under the store's lock: not more
    /// often than each second, and at least daily.
    static let sweepSecondsRange = 1...86_400

    static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    /// The access policy this config describes; `source` names the file in messages.
    public func accessPolicy(source: String) -> AccessPolicy {
        AccessPolicy(applications: applications.isEmpty ? nil : applications, unknownCallers: unknownCallers,
                     adminUIDs: adminUIDs.map(Set.init) ?? [0, getuid()], source: source,
                     bridgeExecutables: bridgeExecutables.map(Set.init) ?? AccessPolicy.defaultBridgeExecutables,
                     portalExecutables: portalExecutables.map(Set.init) ?? AccessPolicy.defaultPortalExecutables)
    }

    /// The server configuration: flags win over this config (the file with the environment's
    /// overrides applied), and it over the defaults (DaemonEnvironment's, by default the
    /// built-in ones).
    public func serverConfiguration(stateDirectory flagState: String?, socket flagSocket: String?,
                                    source: String = "the built-in defaults",
                                    defaults: DaemonEnvironment = DaemonEnvironment([:])) -> ServerConfiguration {
        var store = StoreConfiguration(stateDirectory: flagState ?? stateDirectory ?? defaults.stateDirectory, argon2: argon2)
        store.deviceKeyCredential = defaults.deviceKeyCredential
        var server = ServerConfiguration(socketPath: flagSocket ?? socketPath ?? defaults.socketPath, store: store)
        server.idleTimeoutMs = Int32(idleTimeoutSeconds * 1000)
        server.frameTimeoutMs = Int32(frameTimeoutSeconds * 1000)
        server.maxConnections = maxConnections
        server.maxConnectionsPerUID = maxConnectionsPerUID
        server.busyPollMicroseconds = busyPollMicroseconds
        server.socketMode = socketMode
        server.policy = accessPolicy(source: source)
        server.auditLogPath = auditLogPath
        server.auditIncludeNames = auditIncludeNames
        server.syncDatabase = syncDatabase
        server.credentialSocketPath = credentialSocketPath
        server.prompt = prompt
        server.metrics = metrics
        server.expirySweepSeconds = Double(expirySweepSeconds)
        server.lockPolicy.gracePeriod = Double(lockGraceSeconds)
        server.lockPolicy.autoLockAfter = Double(autoLockSeconds)
        server.lockPolicy.eraseAfterFailures = eraseAfterFailures
        return server
    }
}

/// What the daemon's environment says: the service manager's directories (systemd's
/// $STATE_DIRECTORY, $RUNTIME_DIRECTORY, $CONFIGURATION_DIRECTORY, $CREDENTIALS_DIRECTORY)
/// as defaults below the config file, and KEYCHAIND_* variables that override the file.
/// The order, strongest first: flags, KEYCHAIND_* variables, the config file, the service
/// manager's directories, the built-in defaults.
public struct DaemonEnvironment: Sendable {
    public let variables: [String: String]
    /// Decides the built-in defaults (root's are the system daemon's).
    public let euid: uid_t

    public init(_ variables: [String: String], euid: uid_t = geteuid()) {
        self.variables = variables
        self.euid = euid
    }

    /// The variables that override the config file.
    public static let stateDirectoryOverride = "KEYCHAIND_STATE_DIR"
    public static let socketOverride = "KEYCHAIND_SOCKET"
    public static let logLevelOverride = "KEYCHAIND_LOG_LEVEL"
    public static let configOverride = "KEYCHAIND_CONFIG"
    /// The credential systemd places in $CREDENTIALS_DIRECTORY (LoadCredentialEncrypted=device.key:...).
    public static let deviceKeyCredentialName = "device.key"

    /// A variable's value; an empty one counts as unset.
    func value(_ name: String) -> String? {
        guard let v = variables[name], !v.isEmpty else { return nil }
        return v
    }

    /// The first of a colon-separated list of directories, as systemd sets them when a unit
    /// names several (StateDirectory=a b).
    func firstDirectory(_ name: String) -> String? {
        value(name)?.split(separator: ":", omittingEmptySubsequences: true).first.map(String.init)
    }

    /// $STATE_DIRECTORY, else the built-in default.
    public var stateDirectory: String {
        firstDirectory("STATE_DIRECTORY") ?? DefaultPaths.stateDirectory
    }

    /// $RUNTIME_DIRECTORY/keychaind.sock, else the built-in default.
    public var socketPath: String {
        firstDirectory("RUNTIME_DIRECTORY").map { $0 + "/keychaind.sock" } ?? DefaultPaths.socketPath
    }

    /// $CREDENTIALS_DIRECTORY/device.key when systemd placed it there.
    public var deviceKeyCredential: String? {
        guard let dir = value("CREDENTIALS_DIRECTORY") else { return nil }
        let path = dir + "/" + Self.deviceKeyCredentialName
        var st = stat()
        return lstat(path, &st) == 0 ? path : nil
    }

    /// Which config file to read without --config: KEYCHAIND_CONFIG (which must exist); else,
    /// read only when present, $CONFIGURATION_DIRECTORY/keychaind.toml, or for root
    /// /etc/keychaind/keychaind.toml, or for others $XDG_CONFIG_HOME/keychaind/keychaind.toml
    /// (~/.config/keychaind/keychaind.toml).
    public var configFile: ConfigFile {
        if let path = value(Self.configOverride) { return ConfigFile(path: path, required: true) }
        let path: String
        if let dir = firstDirectory("CONFIGURATION_DIRECTORY") {
            path = dir + "/keychaind.toml"
        } else if euid == 0 {
            path = "/etc/keychaind/keychaind.toml"
        } else if let xdg = value("XDG_CONFIG_HOME") {
            path = xdg + "/keychaind/keychaind.toml"
        } else {
            path = (value("HOME") ?? "/") + "/.config/keychaind/keychaind.toml"
        }
        return ConfigFile(path: path, required: false)
    }

    /// `file` with the KEYCHAIND_* overrides applied; a value the file could not hold either
    /// (an unknown log level) is errSecParam, naming the variable.
    public func overriding(_ file: DaemonConfig) throws(KeychainError) -> DaemonConfig {
        var config = file
        if let dir = value(Self.stateDirectoryOverride) { config.stateDirectory = dir }
        if let socket = value(Self.socketOverride) { config.socketPath = socket }
        if let level = value(Self.logLevelOverride) {
            guard DaemonConfig.logLevels.contains(level) else {
                throw KeychainError(.param, "\(Self.logLevelOverride)=\(LogSafe.value(level)) is not a log level: use one of \(DaemonConfig.logLevels.joined(separator: ", "))")
            }
            config.logLevel = level
        }
        return config
    }
}

/// A config file the daemon is to read; one that is not `required` is read only when present.
public struct ConfigFile: Sendable, Equatable {
    public let path: String
    public let required: Bool

    public init(path: String, required: Bool) {
        self.path = path
        self.required = required
    }

    /// Whether there is a file to read: a required one always (a missing one is then an error).
    public var shouldRead: Bool {
        var st = stat()
        return required || stat(path, &st) == 0 || errno != ENOENT
    }
}
