#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainSync

/// The drop-in that lets the system unit reach its `[sync]` PostgreSQL server and nothing else
/// (issue 27; docs/sync.md, "The system unit and sync"). The unit itself keeps
/// PrivateNetwork=yes and IPAddressDeny=any: only a machine that syncs gets a network, and
/// then only toward the server's addresses (IPAddressAllow= takes addresses, not names, so
/// the names are resolved when the drop-in is written).
public enum SyncNetworkDropIn {
    /// The drop-in for `conninfo`; nil when every host is a Unix socket, which needs no network.
    /// `resolve` gives a host name's addresses (getaddrinfo by default).
    static func text(conninfo: String, source: String,
                     resolve: (String) throws(KeychainError) -> [String] = SyncNetworkDropIn.addresses) throws(KeychainError) -> String? {
        let settings = try PostgresConnection.settings(of: conninfo)
        let hosts = list(settings["host"]), given = list(settings["hostaddr"])
        var allowed: [String] = []
        if given.isEmpty {
            for host in hosts where !(host.isEmpty || host.hasPrefix("/") || host.hasPrefix("@")) {
                allowed += isAddress(host) ? [host] : try resolve(host)
            }
        } else {
            allowed = given
        }
        guard !allowed.isEmpty else { return nil }
        var seen = Set<String>()
        allowed = allowed.filter { seen.insert($0).inserted }
        let names = given.isEmpty ? hosts.filter { !$0.hasPrefix("/") && !$0.hasPrefix("@") && !$0.isEmpty && !isAddress($0) } : []
        var lines = [
            "# Written by `keychaind --sync-network` from [sync] database in \(source):",
            "# the network opened for the sync server alone. Write it again when the server's address changes.",
        ]
        if !names.isEmpty {
            lines.append("# keychaind resolves \(names.joined(separator: ", ")) itself, and DNS is not allowed here: add")
            lines.append("# hostaddr=\(allowed.joined(separator: ",")) to the conninfo (sslmode=verify-full still checks the name).")
        }
        lines += [
            "[Service]",
            // A private network namespace has its own loopback: even a local server needs the host's.
            "PrivateNetwork=no",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
            "IPAddressDeny=any",
            "IPAddressAllow=\(allowed.joined(separator: " "))",
        ]
        return lines.joined(separator: "\n") + "\n"
    }

    /// `keychaind --sync-network`: the drop-in for the config's [sync] database.
    public static func text(for config: DaemonConfig, source: String) throws(KeychainError) -> String? {
        guard let conninfo = config.syncDatabase else {
            throw KeychainError(.param, "\(source) has no [sync] database: the unit needs no network")
        }
        return try text(conninfo: conninfo, source: source)
    }

    private static func list(_ value: String?) -> [String] {
        (value ?? "").split(separator: ",", omittingEmptySubsequences: true).map { String($0).trimmedSpaces }
    }

    static func isAddress(_ s: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, s, &v4) == 1 || inet_pton(AF_INET6, s, &v6) == 1
    }

    /// A host's addresses, numeric, as getaddrinfo gives them.
    static func addresses(_ host: String) throws(KeychainError) -> [String] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, nil, &hints, &result)
        guard rc == 0 else {
            throw KeychainError(.param, "cannot resolve the [sync] database host \(LogSafe.value(host)): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(result) }
        var out: [String] = []
        var entry = result
        while let e = entry {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(e.pointee.ai_addr, e.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0 {
                out.append(String(cString: buffer))
            }
            entry = e.pointee.ai_next
        }
        return out
    }
}

private extension String {
    var trimmedSpaces: String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}
