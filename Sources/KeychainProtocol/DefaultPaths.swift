#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// Where keychaind lives when no flag says otherwise; the client uses the same rule to find
/// the socket, after KEYCHAIN_SOCKET.
public enum DefaultPaths {
    public static func env(_ name: String) -> String? {
        guard let v = getenv(name), v.pointee != 0 else { return nil }
        return String(cString: v)
    }

    /// root: /var/lib/keychaind; others: $XDG_DATA_HOME/keychaind or ~/.local/share/keychaind.
    public static var stateDirectory: String {
        if getuid() == 0 { return "/var/lib/keychaind" }
        if let xdg = env("XDG_DATA_HOME") { return xdg + "/keychaind" }
        return (env("HOME") ?? "/tmp") + "/.local/share/keychaind"
    }

    /// root: /run/keychaind/keychaind.sock; others: $XDG_RUNTIME_DIR/keychaind.sock, or
    /// /tmp/keychaind-UID/keychaind.sock in a 0700 directory.
    public static var socketPath: String {
        if getuid() == 0 { return "/run/keychaind/keychaind.sock" }
        if let run = env("XDG_RUNTIME_DIR") { return run + "/keychaind.sock" }
        return "/tmp/keychaind-\(getuid())/keychaind.sock"
    }

    /// The socket a client should use: an explicit path, else KEYCHAIN_SOCKET, else the default.
    public static func clientSocketPath(_ explicit: String? = nil) -> String {
        explicit ?? env("KEYCHAIN_SOCKET") ?? socketPath
    }

    /// The per-user fallback directory, /tmp/keychaind-UID: anyone can create it first.
    public static var sharedTemporarySocketDirectory: String { "/tmp/keychaind-\(getuid())" }

    /// A client uses the /tmp fallback only when its directory is the caller's own and
    /// private: a directory another user made first could hold their socket, or let them
    /// swap ours. (The server's uid is checked too, on every connection: ServerTrust.)
    public static func checkClientSocketDirectory(of path: String) throws(KeychainError) {
        let dir = sharedTemporarySocketDirectory
        guard path == dir + "/keychaind.sock" else { return }
        var st = stat()
        guard lstat(dir, &st) == 0 else { return }  // absent: connecting fails with its own message
        guard (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o077 == 0 else {
            throw KeychainError(.serviceNotAvailable, "\(dir) is not a private directory owned by you (uid \(getuid()), mode 0700), so its socket could be anyone's; remove it, or set KEYCHAIN_SOCKET to your daemon's socket")
        }
    }
}
