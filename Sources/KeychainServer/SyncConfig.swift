#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainSync

/// The checks `[sync] database` passes at load (docs/sync.md, 7.4): the conninfo holds no
/// password (that would put it in the config file); a `passfile` is a regular file of mode
/// 0600 (or stricter) owned by the daemon's user; and below `sslmode=verify-full` every host is
/// loopback or a Unix socket, since anything less lets a machine in the middle read the
/// database's traffic or pose as the server.
enum SyncDatabaseSetting {
    static func check(_ conninfo: String, daemonUID: uid_t = geteuid()) throws(KeychainError) {
        let settings = try PostgresConnection.settings(of: conninfo)
        if settings["password"] != nil {
            throw KeychainError(.param, "the [sync] database conninfo holds a password: put it in a passfile= (mode 0600, owned by keychaind's user) or use a client certificate (sslcert/sslkey)")
        }
        if let passfile = settings["passfile"] {
            var st = stat()
            guard lstat(passfile, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else {
                throw KeychainError(.param, "the [sync] passfile \(LogSafe.value(passfile)) is not a regular file")
            }
            guard st.st_uid == daemonUID, st.st_mode & 0o077 == 0 else {
                throw KeychainError(.param, "the [sync] passfile \(LogSafe.value(passfile)) must be mode 0600 and owned by uid \(daemonUID)")
            }
        }
        let sslmode = settings["sslmode"] ?? "prefer"
        guard sslmode != "verify-full" else { return }
        let hosts = (settings["host"] ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        let addresses = (settings["hostaddr"] ?? "").split(separator: ",", omittingEmptySubsequences: true).map(String.init)
        let remote = (addresses.isEmpty ? hosts : addresses).filter { !isLocal($0) }
        if let first = remote.first {
            throw KeychainError(.param, "the [sync] database host \(LogSafe.value(first)) is not loopback or a Unix socket, so sslmode must be verify-full (it is \(LogSafe.value(sslmode)))")
        }
    }

    /// Loopback addresses, Unix socket directories (and abstract sockets), and the default
    /// (an empty host: the Unix socket).
    static func isLocal(_ host: String) -> Bool {
        let h = host.trimmingSpaces
        if h.isEmpty || h.hasPrefix("/") || h.hasPrefix("@") || h == "localhost" || h == "::1" || h == "[::1]" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }
}

private extension String {
    var trimmingSpaces: String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}
