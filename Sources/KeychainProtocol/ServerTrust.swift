#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// Who the kernel says is at the other end of a connected Unix socket (SO_PEERCRED: recorded
/// when the connection was made, not claimed by the peer).
public struct PeerCredentials: Sendable, Equatable {
    public let pid: Int32
    public let uid: UInt32
    public let gid: UInt32

    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }

    /// The peer of `socket`, or nil when the kernel will not say.
    public static func of(_ socket: UnixSocket) -> PeerCredentials? {
        // struct ucred is three 32-bit fields (pid, uid, gid); Swift's Glibc module lacks the
        // struct (it needs _GNU_SOURCE) but not the option.
        var raw: (Int32, UInt32, UInt32) = (0, 0, 0)
        var length = socklen_t(MemoryLayout.size(ofValue: raw))
        guard (try? socket.withDescriptor { fd in getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &raw, &length) }) == 0,
              Int(length) == MemoryLayout.size(ofValue: raw) else { return nil }
        return PeerCredentials(pid: raw.0, uid: raw.1, gid: raw.2)
    }
}

/// Which daemons a client sends its requests to: one running as root, as the caller's own
/// uid, or as a uid the caller names (an argument, else KEYCHAIN_TRUST_UID). Checked on every
/// new connection before a byte is written, so that a socket another user created first (in
/// /tmp, or at the per-user default when XDG_RUNTIME_DIR is unset) never receives a secret
/// or a passcode (docs/security.md, "Who answers on the socket").
public struct ServerTrust: Sendable, Equatable {
    /// The uids whose daemons are trusted: two or three, so an array (a Set's first use cost a
    /// `keychain get` 4% of its instructions in generic metadata and a conformance lookup).
    public let uids: [UInt32]
    /// The uid named explicitly, if any.
    public let named: UInt32?

    public static let environmentVariable = "KEYCHAIN_TRUST_UID"

    /// Root and the caller, plus `named`.
    public init(named: UInt32? = nil) {
        self.named = named
        uids = [0, getuid()] + (named.map { [$0] } ?? [])
    }

    /// `explicit` if given, else KEYCHAIN_TRUST_UID, else nobody extra: a numeric uid or a
    /// user name of /etc/passwd (the package's daemon runs as `keychaind`, whose uid differs
    /// between machines). /etc/passwd is read directly: the CLI and git helper are static
    /// binaries, where glibc's NSS lookup is unreliable, so users known only to LDAP or
    /// systemd-homed need their uid. A value that names nobody is an error, not a silent
    /// fallback.
    public static func resolve(_ explicit: String? = nil) throws(KeychainError) -> ServerTrust {
        let given = explicit ?? DefaultPaths.env(environmentVariable)
        guard let given else { return ServerTrust() }
        guard let uid = UInt32(given) ?? passwdEntries().first(where: { $0.name == given })?.uid else {
            throw KeychainError(.param, "\(explicit == nil ? environmentVariable : "--trust-uid") is \"\(given)\", which is neither a numeric uid nor a user in /etc/passwd")
        }
        return ServerTrust(named: uid)
    }

    /// Throws errSecServiceNotAvailable, saying who answered and how to trust it, unless the
    /// peer of `socket` runs as a trusted uid.
    public func check(_ socket: UnixSocket, path: String) throws(KeychainError) {
        guard let peer = PeerCredentials.of(socket) else {
            throw KeychainError(.serviceNotAvailable, "cannot tell who serves \(path) (SO_PEERCRED failed); refusing to send anything")
        }
        guard !uids.contains(peer.uid) else { return }
        throw KeychainError(.serviceNotAvailable, "refusing to talk to keychaind at \(path): it is served by uid \(peer.uid) (\(Self.userName(peer.uid))), not by root or by you (uid \(getuid())); if you trust that daemon, set \(Self.environmentVariable)=\(peer.uid) or pass --trust-uid \(peer.uid)")
    }

    /// The name /etc/passwd gives `uid`, for the message only.
    static func userName(_ uid: UInt32) -> String {
        passwdEntries().first { $0.uid == uid }?.name ?? "unknown user"
    }

    /// The users of /etc/passwd, read directly (no NSS in a static binary).
    static func passwdEntries() -> [(name: String, uid: UInt32)] {
        guard let file = fopen("/etc/passwd", "re") else { return [] }
        defer { fclose(file) }
        var entries: [(name: String, uid: UInt32)] = []
        var line = [CChar](repeating: 0, count: 4096)
        while fgets(&line, Int32(line.count), file) != nil {
            let fields = String(cString: line).split(separator: ":", omittingEmptySubsequences: false)
            if fields.count > 2, !fields[0].isEmpty, let uid = UInt32(fields[2]) { entries.append((String(fields[0]), uid)) }
        }
        return entries
    }
}
