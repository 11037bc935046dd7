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

    public init(pid: Int32, uid: UInt32, gid: UInt32, executable: String?) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.executable = executable
    }

    /// Reads the credentials of a connected socket's peer.
    public static func of(_ socket: UnixSocket) -> Caller? {
        guard let peer = PeerCredentials.of(socket) else { return nil }
        return Caller(pid: peer.pid, uid: peer.uid, gid: peer.gid, executable: executablePath(pid: peer.pid))
    }

    static func executablePath(pid: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public var description: String { "uid=\(uid) pid=\(pid)" }
}

/// An application of the config: the callers that count as it and the access groups it may
/// use, in order (the first is where items added without agrp go).
public struct Application: Sendable, Equatable {
    public var id: String
    public var uids: Set<UInt32>
    /// Executables (/proc/PID/exe) that count as this app; empty: any executable of its uids.
    public var executables: Set<String>
    public var groups: [String]

    public init(id: String, uids: Set<UInt32>, executables: Set<String> = [], groups: [String]) {
        self.id = id
        self.uids = uids
        self.executables = executables
        self.groups = groups
    }

    func matches(_ caller: Caller) -> Bool {
        guard uids.contains(caller.uid) else { return false }
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

    /// With no config: the daemon's own uid is an application, `owner`, with the private group
    /// `uid.<uid>`; other callers are refused; root and the daemon's uid are admins.
    public init(applications: [Application]? = nil, unknownCallers: UnknownCallers = .refuse,
                adminUIDs: Set<UInt32> = [0, getuid()], source: String = "the built-in defaults") {
        self.applications = applications ?? [Application(id: "owner", uids: [getuid()], groups: ["uid.\(getuid())"])]
        self.unknownCallers = unknownCallers
        self.adminUIDs = adminUIDs
        self.source = source
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
        "uid \(caller.uid) (\(caller.executable ?? "unknown executable")) matches no application; add it to an [[app]] entry in \(source), or set unknown_callers = \"private-group\""
    }

    public func isAdmin(_ caller: Caller) -> Bool { adminUIDs.contains(caller.uid) }

    /// A name for the caller in the audit log.
    public func appID(for caller: Caller) -> String {
        application(for: caller)?.id ?? (unknownCallers == .privateGroup ? "uid.\(caller.uid)" : "unknown")
    }
}
