#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import KeychainModel
import KeychainProtocol
import KeychainStore

/// Who is calling, as the kernel says (SO_PEERCRED at accept) — never what the client claims.
public struct Caller: Sendable, Equatable, CustomStringConvertible {
    public let pid: Int32
    public let uid: UInt32
    public let gid: UInt32
    /// /proc/PID/exe read at accept time; nil if the process is gone or unreadable.
    public let executable: String?
    /// The systemd unit of its cgroup at accept, read only while some application names units.
    public let unit: SystemdUnit?
    /// Its start time (clock ticks since boot, /proc/PID/stat) at accept, read only while
    /// polkit may be asked about it: with the pid, what names this process to polkitd.
    public let startTime: UInt64?

    public init(pid: Int32, uid: UInt32, gid: UInt32, executable: String?, unit: SystemdUnit? = nil, startTime: UInt64? = nil) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.executable = executable
        self.unit = unit
        self.startTime = startTime
    }

    /// Reads the credentials of a connected socket's peer. With `holdingProcess` (the policy
    /// tells some application apart by its executable) it also holds on to the process, so
    /// that each later request can be checked against it (`PeerProcess`); otherwise the
    /// executable is read once, for messages, and nothing is kept. With `readingUnit` (some
    /// application names units) its unit is read through the same descriptor.
    /// With `readingStartTime` (polkit may be asked) its start time too.
    static func of(_ socket: UnixSocket, holdingProcess: Bool, readingUnit: Bool = false,
                   readingStartTime: Bool = false) -> (Caller, PeerProcess?)? {
        guard let peer = PeerCredentials.of(socket) else { return nil }
        guard holdingProcess || readingUnit || readingStartTime else {
            return (Caller(pid: peer.pid, uid: peer.uid, gid: peer.gid, executable: PeerProcess.executable(pid: peer.pid)), nil)
        }
        let process = PeerProcess(pid: peer.pid, uid: peer.uid)
        let caller = Caller(pid: peer.pid, uid: peer.uid, gid: peer.gid, executable: process?.executable(),
                            unit: readingUnit ? process?.unit() : nil,
                            startTime: readingStartTime ? process?.startTime() : nil)
        return (caller, holdingProcess ? process : nil)
    }

    public var description: String { "uid=\(uid) pid=\(pid)" }
}

/// The process that connected, held by a descriptor of its /proc directory. Unlike the pid,
/// the descriptor cannot come to name another process: once that process has exited, reads
/// through it fail, even if the pid is reused. Each request checks through it that the process
/// still runs the executable it connected with, so a permitted program cannot connect and then
/// exec something else that inherits its access groups (docs/security.md, "Who a caller is").
final class PeerProcess {
    private let directory: Int32
    /// The command name (stat's field 2) at connect: what is left to compare while the
    /// executable is hidden, for an exec into a set-uid or unreadable program keeps a process
    /// non-dumpable but renames it.
    private let name: [UInt8]?

    /// nil when the process is already gone, or its effective uid is not the peer's (the pid
    /// was reused between the connect and now). The status file, not the directory's owner:
    /// a non-dumpable process's /proc entry belongs to root whoever runs it.
    init?(pid: Int32, uid: UInt32) {
        let fd = open("/proc/\(pid)", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        guard let status = ProcFile.read("status", in: fd),
              let uids = DelegatedProcess.ids(in: status, line: "Uid:"), uids.effective == uid else {
            close(fd)
            return nil
        }
        directory = fd
        name = ProcFile.read("stat", in: fd).flatMap(Self.commandName)
    }

    deinit { close(directory) }

    /// Its systemd unit, from its cgroup file (readable whoever runs it, dumpable or not).
    func unit() -> SystemdUnit? { ProcFile.read("cgroup", in: directory).flatMap(SystemdUnit.init(cgroupFile:)) }

    /// Its command name now (stat's second field): the process's own to set (PR_SET_NAME), and
    /// what exec sets to the new program's file name.
    func commandName() -> [UInt8]? { ProcFile.read("stat", in: directory).flatMap(Self.commandName) }

    /// Its start time (stat's field 22), through the descriptor opened for this process.
    func startTime() -> UInt64? { ProcFile.read("stat", in: directory).flatMap(DelegatedProcess.parseStat)?.startTime }

    /// The executable the process runs now (its path, as /proc/PID/exe gives it, without the
    /// " (deleted)" that follows a binary replaced on disk, which the process still runs);
    /// nil once the process has exited.
    func executable() -> String? { Self.readExecutable(in: directory, "exe") }

    /// The executable of `pid` now, read once (no descriptor kept). Read for every connection:
    /// its path is written into a buffer on the stack, not interpolated into a String.
    static func executable(pid: Int32) -> String? {
        var path: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)  // "/proc/" + 10 digits + "/exe" + NUL
        return withUnsafeMutableBytes(of: &path) { raw in
            var n = 0
            for byte in "/proc/".utf8 { raw[n] = byte; n += 1 }
            let digitsStart = n
            var rest = UInt32(bitPattern: pid)
            repeat {
                raw[n] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                n += 1
            } while rest > 0
            raw[digitsStart..<n].reverse()
            for byte in "/exe".utf8 { raw[n] = byte; n += 1 }
            raw[n] = 0
            return readExecutable(in: AT_FDCWD, raw.baseAddress!.assumingMemoryBound(to: CChar.self))
        }
    }

    static func readExecutable(in directory: Int32, _ path: UnsafePointer<CChar>) -> String? {
        if case .path(let exe) = readExecutableLink(in: directory, path) { return exe }
        return nil
    }

    /// What /proc shows of a process's executable.
    enum ExecutableLink: Equatable {
        case path(String)
        /// EACCES: the process is not dumpable, and this daemon may not look.
        case hidden
        /// The process has exited (or the link cannot be read for another reason).
        case gone
    }

    func executableLink() -> ExecutableLink { Self.readExecutableLink(in: directory, "exe") }

    private static func readExecutableLink(in directory: Int32, _ path: UnsafePointer<CChar>) -> ExecutableLink {
        // Into the stack, uninitialized: a zeroed 4 KiB array per connection showed in the
        // daemon's profile. A link that may not have fitted is read again into PATH_MAX.
        if let link = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1024, { readLink(in: directory, path, into: $0) }) {
            return link
        }
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Int(PATH_MAX) + 1) { readLink(in: directory, path, into: $0) } ?? .gone
    }

    /// nil when the link filled `buffer`, so may be longer.
    private static func readLink(in directory: Int32, _ path: UnsafePointer<CChar>,
                                 into buffer: UnsafeMutableBufferPointer<UInt8>) -> ExecutableLink? {
        let n = buffer.withMemoryRebound(to: CChar.self) { readlinkat(directory, path, $0.baseAddress!, $0.count) }
        guard n > 0 else { return n < 0 && errno == EACCES ? .hidden : .gone }
        guard n < buffer.count else { return nil }
        var length = n
        let deleted = " (deleted)".utf8
        if length > deleted.count && buffer[(length - deleted.count)..<length].elementsEqual(deleted) { length -= deleted.count }
        return .path(String(decoding: UnsafeBufferPointer(rebasing: buffer[..<length]), as: UTF8.self))
    }

    /// Whether the process is still there and runs what it ran at connect (`executable`, nil
    /// when it was hidden then). An executable that shows must be the same one: a process
    /// hidden at connect that shows one now has exec'd (exec makes a process dumpable again).
    /// One that stays hidden is compared by what /proc shows of it, its command name
    /// (docs/security.md, "Callers whose executable is hidden").
    func stillRuns(_ executable: String?) -> Bool {
        switch executableLink() {
        case .path(let now): return now == executable
        case .gone: return false
        case .hidden:
            guard let now = commandName() else { return false }
            return now == name
        }
    }

    /// The command name of a /proc/PID/stat: between the first "(" and the last ")", for the
    /// name itself may hold either.
    static func commandName(_ stat: [UInt8]) -> [UInt8]? {
        guard let open = stat.firstIndex(of: UInt8(ascii: "(")), let close = stat.lastIndex(of: UInt8(ascii: ")")),
              open < close else { return nil }
        return Array(stat[(open + 1)..<close])
    }
}

/// Small /proc files, read through a process's directory descriptor.
enum ProcFile {
    static func read(_ name: String, in directory: Int32) -> [UInt8]? {
        let fd = openat(directory, name, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 8192)
        var total = 0
        while total < buffer.count {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            total += n
        }
        return total > 0 ? Array(buffer[0..<total]) : nil
    }
}

/// An application of the config: the callers that count as it and the access groups it may
/// use, in order (the first is where items added without agrp go).
public struct Application: Sendable, Equatable {
    public var id: String
    public var uids: Set<UInt32>
    /// Executables (/proc/PID/exe) that count as this app; empty: any executable of its uids.
    public var executables: Set<String>
    /// System units whose processes count as this app (`units`); with `userUnits` empty too:
    /// any unit. Empty `uids` then means any uid of those units.
    public var units: Set<String>
    /// Units of the caller's own user manager, user@UID.service (`user_units`): any user can
    /// start a user unit of any name, so these always come with `uids`.
    public var userUnits: Set<String>
    public var groups: [String]

    public init(id: String, uids: Set<UInt32>, executables: Set<String> = [], units: Set<String> = [],
                userUnits: Set<String> = [], groups: [String]) {
        self.id = id
        self.uids = uids
        self.executables = executables
        self.units = units
        self.userUnits = userUnits
        self.groups = groups
    }

    /// Every rule the app gives must hold: its uids, its units, its executables.
    func matches(_ caller: Caller) -> Bool {
        guard uids.isEmpty ? !units.isEmpty : uids.contains(caller.uid) else { return false }
        if !units.isEmpty || !userUnits.isEmpty {
            switch caller.unit {
            case .system(let name)?: guard units.contains(name) else { return false }
            case .user(let uid, let name)?: guard uid == caller.uid, userUnits.contains(name) else { return false }
            case nil: return false
            }
        }
        guard !executables.isEmpty else { return true }
        return caller.executable.map(executables.contains) ?? false
    }
}

/// What a caller that matches no application gets.
public enum UnknownCallers: String, Sendable, Equatable {
    /// Every call fails with errSecMissingEntitlement, naming what to add to the config.
    case refuse
    /// A private group `uid.<uid>` of its own: for a per-user daemon serving one user.
    case privateGroup = "private-group"
}

/// Who may do what: maps a caller, identified by the kernel, to an application and its
/// groups, and says whether it may make admin calls. An immutable value: a config reload
/// replaces it whole.
public struct AccessPolicy: Sendable, Equatable {
    /// In config order: the first application that matches a caller is its application.
    public var applications: [Application]
    public var unknownCallers: UnknownCallers
    /// uids allowed to lock, unlock and manage the passcode.
    public var adminUIDs: Set<UInt32>
    /// Where the config came from, for error messages ("add it to ... in FILE").
    public var source: String
    /// Programs that may send asCaller: the Secret Service bridge (bridge_executables).
    public var bridgeExecutables: Set<String>
    /// Programs for which the bridge may ask for a sandboxed app's portal secret: the
    /// desktop portal (portal_executables).
    public var portalExecutables: Set<String>

    /// The built-in bridge_executables: the packaged bridge, and one beside this keychaind
    /// (a build directory, or an install elsewhere than /usr).
    public static let defaultBridgeExecutables: Set<String> = {
        var paths: Set<String> = ["/usr/bin/keychain-secret-service"]
        if let own = PeerProcess.readExecutable(in: AT_FDCWD, "/proc/self/exe"), let slash = own.lastIndex(of: "/") {
            paths.insert(String(own[..<slash]) + "/keychain-secret-service")
        }
        return paths
    }()
    public static let defaultPortalExecutables: Set<String> = ["/usr/libexec/xdg-desktop-portal"]

    /// With no config: the daemon's own uid is an application, `owner`, with the private group
    /// `uid.<uid>`; other callers are refused; root and the daemon's uid are admins.
    public init(applications: [Application]? = nil, unknownCallers: UnknownCallers = .refuse,
                adminUIDs: Set<UInt32> = [0, getuid()], source: String = "the built-in defaults",
                bridgeExecutables: Set<String> = AccessPolicy.defaultBridgeExecutables,
                portalExecutables: Set<String> = AccessPolicy.defaultPortalExecutables) {
        self.applications = applications ?? [Application(id: "owner", uids: [getuid()], groups: ["uid.\(getuid())"])]
        self.unknownCallers = unknownCallers
        self.adminUIDs = adminUIDs
        self.source = source
        self.bridgeExecutables = bridgeExecutables
        self.portalExecutables = portalExecutables
    }

    /// Whether a connection from `executable` may speak for other processes.
    public func isBridge(_ executable: String?) -> Bool {
        executable.map(bridgeExecutables.contains) ?? false
    }

    /// The caller's application, if any.
    public func application(for caller: Caller) -> Application? {
        applications.first { $0.matches(caller) }
    }

    /// The caller's groups. A refused caller gets none, so every item call fails with
    /// errSecMissingEntitlement; `refusal` says why.
    public func scope(for caller: Caller) -> AccessScope {
        if let app = application(for: caller) { return AccessScope(groups: app.groups) }
        switch unknownCallers {
        case .refuse: return AccessScope(groups: [])
        case .privateGroup: return AccessScope(groups: ["uid.\(caller.uid)"])
        }
    }

    /// The message for a caller that matches no application.
    public func refusal(for caller: Caller) -> String {
        "uid \(caller.uid) (\(caller.executable ?? "executable not readable")\(caller.unit.map { ", unit \($0)" } ?? "")) matches no application; add it to an [[app]] entry in \(source), or set unknown_callers = \"private-group\""
    }

    public func isAdmin(_ caller: Caller) -> Bool { adminUIDs.contains(caller.uid) }

    /// Whether some application is told apart from the rest of its uids by its executable.
    public var identifiesByExecutable: Bool { applications.contains { !$0.executables.isEmpty } }

    /// Whether some application is told apart by its systemd unit: only then is a caller's
    /// cgroup read at accept.
    public var identifiesByUnit: Bool { applications.contains { !$0.units.isEmpty || !$0.userUnits.isEmpty } }

    /// A name for the caller in the audit log.
    public func appID(for caller: Caller) -> String {
        application(for: caller)?.id ?? (unknownCallers == .privateGroup ? "uid.\(caller.uid)" : "unknown")
    }
}
