#if canImport(Glibc)
import Glibc
#endif

/// Where keychaind lives when no flag says otherwise; the client uses the same rule to find
/// the socket, after KEYCHAIN_SOCKET.
public enum DefaultPaths {
    static func env(_ name: String) -> String? {
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
}
