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
        var pid: Int32 = 0, uid: UInt32 = 0, gid: UInt32 = 0
        guard csystem_peer_credentials(socket.fd, &pid, &uid, &gid) == 0 else { return nil }
        return Caller(pid: pid, uid: uid, gid: gid, executable: executablePath(pid: pid))
    }

    static func executablePath(pid: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public var description: String { "uid=\(uid) pid=\(pid)" }
}

/// Maps a caller to its access groups and says whether it may make admin calls.
/// Until the configurable policy (issue 5), every uid has one private group, `uid.<uid>`:
/// the right shape for a per-user daemon, and no uid ever sees another's items.
public struct AccessPolicy: Sendable {
    /// uids allowed to lock, unlock and manage the passcode: the daemon's own and root.
    public var adminUIDs: Set<UInt32>

    public init(adminUIDs: Set<UInt32> = [0, getuid()]) {
        self.adminUIDs = adminUIDs
    }

    public func scope(for caller: Caller) -> AccessScope {
        AccessScope(groups: ["uid.\(caller.uid)"])
    }

    public func isAdmin(_ caller: Caller) -> Bool { adminUIDs.contains(caller.uid) }
}
