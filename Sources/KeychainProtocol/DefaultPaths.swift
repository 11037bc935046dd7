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
    /// /tmp/keychaind-UID/keychaind.sock in a 0700 directory, or, when another user made that
    /// directory first, the socket in `homeSocketDirectory`, which only the user can create.
    /// The daemon listens there whenever the /tmp one is taken; a client goes there once it
    /// exists (before that it says why the /tmp one is refused).
    public static var socketPath: String { serverSocketPath }

    /// Where keychaind listens by default (see `socketPath`).
    public static var serverSocketPath: String {
        if getuid() == 0 { return "/run/keychaind/keychaind.sock" }
        if let run = env("XDG_RUNTIME_DIR") { return run + "/keychaind.sock" }
        if !isUsable(sharedTemporarySocketDirectory, absentToo: true), let home = homeSocketDirectory {
            return home + "/keychaind.sock"
        }
        return sharedTemporarySocketDirectory + "/keychaind.sock"
    }

    /// Where a client looks by default (see `socketPath`).
    public static var clientDefaultSocketPath: String {
        if getuid() == 0 || env("XDG_RUNTIME_DIR") != nil { return serverSocketPath }
        if !isUsable(sharedTemporarySocketDirectory, absentToo: true), let home = homeSocketDirectory,
           isUsable(home, absentToo: false) {
            return home + "/keychaind.sock"
        }
        return sharedTemporarySocketDirectory + "/keychaind.sock"
    }

    /// The place of the socket when /tmp/keychaind-UID is another user's:
    /// $XDG_STATE_HOME/keychaind, else ~/.local/state/keychaind (nil without HOME).
    public static var homeSocketDirectory: String? {
        if let state = env("XDG_STATE_HOME"), state.hasPrefix("/") { return state + "/keychaind" }
        guard let home = env("HOME"), home.hasPrefix("/"), home != "/" else { return nil }
        return home + "/.local/state/keychaind"
    }

    /// A real directory (not a link) of this uid that no one else may enter; or, with
    /// `absentToo`, none yet (whoever creates it first owns it).
    static func isUsable(_ directory: String, absentToo: Bool) -> Bool {
        var st = stat()
        guard lstat(directory, &st) == 0 else { return absentToo && errno == ENOENT }
        return (st.st_mode & S_IFMT) == S_IFDIR && st.st_uid == getuid() && st.st_mode & 0o077 == 0
    }

    /// The socket a client should use: an explicit path, else KEYCHAIN_SOCKET, else the default.
    public static func clientSocketPath(_ explicit: String? = nil) -> String {
        explicit ?? env("KEYCHAIN_SOCKET") ?? clientDefaultSocketPath
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
            let home = homeSocketDirectory.map { "; keychaind started now listens in \($0) instead" } ?? "; with HOME set, keychaind started now listens in ~/.local/state/keychaind instead"
            throw KeychainError(.serviceNotAvailable, "\(dir) is not a private directory owned by you (uid \(getuid()), mode 0700), so its socket could be anyone's; remove it, or set KEYCHAIN_SOCKET to your daemon's socket\(home)")
        }
    }
}
