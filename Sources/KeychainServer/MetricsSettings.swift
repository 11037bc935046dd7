#if canImport(Glibc)
import Glibc
#endif
import TOML

/// Where the metrics listener serves a scraper: a Unix socket, or a loopback TCP port.
public enum MetricsEndpoint: Sendable, Equatable, CustomStringConvertible {
    /// An absolute path.
    case unix(String)
    /// A loopback address literal (127.0.0.0/8 or ::1, IPv6 without brackets) and a port.
    case tcp(address: String, port: UInt16)

    /// `unix:/path` or `tcp:127.0.0.1:PORT` / `tcp:[::1]:PORT`; the error says what is wrong.
    /// A host name is refused, not resolved: what it names can change after the check.
    static func parse(_ text: String) throws(Invalid) -> MetricsEndpoint {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard path.hasPrefix("/"), !path.hasSuffix("/"), !path.utf8.contains(0), path.utf8.count < 108 else {
                throw Invalid("listen = \"unix:PATH\" needs an absolute path of a file, shorter than 108 bytes")
            }
            return .unix(path)
        }
        guard text.hasPrefix("tcp:") else {
            throw Invalid("listen must be \"unix:/path\" or \"tcp:127.0.0.1:PORT\" (or \"tcp:[::1]:PORT\")")
        }
        let rest = text.dropFirst(4)
        let host: Substring, portText: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]"), rest[rest.index(after: close)...].hasPrefix(":") else {
                throw Invalid("listen = \"tcp:[ADDRESS]:PORT\" needs the port after the bracket")
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            portText = rest[rest.index(close, offsetBy: 2)...]
        } else {
            guard let colon = rest.lastIndex(of: ":") else { throw Invalid("listen = \"tcp:ADDRESS:PORT\" needs a port") }
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        }
        guard let port = UInt16(portText), port > 0 else {
            throw Invalid("the port in listen must be a number in 1...65535")
        }
        guard isLoopback(String(host)) else {
            throw Invalid("listen = \"\(text)\" is not a loopback address: the metrics listener takes only 127.0.0.0/8 or [::1], by number (any other address would show the lock state and the timing of every call to the network)")
        }
        return .tcp(address: String(host), port: port)
    }

    /// Whether `host` is an IPv4 address in 127.0.0.0/8 or the IPv6 address ::1, written as a number.
    static func isLoopback(_ host: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return UInt32(bigEndian: v4.s_addr) >> 24 == 127
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        return withUnsafeBytes(of: &v6) { Array($0) } == [UInt8](repeating: 0, count: 15) + [1]
    }

    struct Invalid: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    public var description: String {
        switch self {
        case .unix(let path): "unix:\(path)"
        case .tcp(let address, let port): address.contains(":") ? "tcp:[\(address)]:\(port)" : "tcp:\(address):\(port)"
        }
    }
}

/// `[metrics]`: the optional listener that serves the metrics to a scraper (issue 27). Off
/// unless `listen` is set: the lock state and the timing of every call tell whoever can read
/// them when the keychain is used (docs/security.md, "Metrics").
public struct MetricsSettings: Sendable, Equatable {
    public var listen: MetricsEndpoint?
    /// TCP is refused unless this is true as well: every local user can connect to a loopback port.
    public var allowTCP = false
    /// The group that may connect to a Unix socket (mode 0660); nil: the daemon's uid alone (0600).
    public var group: String?
    var groupID: gid_t?

    public init() {}

    /// Reads the section's keys, then checks them together (allow_tcp may follow listen).
    mutating func read(_ table: TOMLTable, line: Int) throws(DaemonConfig.ParseError) {
        for setting in table.entries {
            let n = setting.keyPosition.line
            switch (setting.key, setting.value.kind) {
            case ("listen", .string(let text)):
                do throws(MetricsEndpoint.Invalid) {
                    listen = try MetricsEndpoint.parse(text)
                } catch {
                    throw DaemonConfig.ParseError(line: n, message: error.message)
                }
            case ("allow_tcp", .bool(let allowed)):
                allowTCP = allowed
            case ("group", .string(let name)):
                guard !name.isEmpty, let entry = getgrnam(name) else {
                    throw DaemonConfig.ParseError(line: n, message: "group in [metrics]: no such group \(name)")
                }
                group = name
                groupID = entry.pointee.gr_gid
            case ("listen", _), ("group", _):
                throw DaemonConfig.ParseError(line: n, message: "\(setting.key) in [metrics] must be a string")
            case ("allow_tcp", _):
                throw DaemonConfig.ParseError(line: n, message: "allow_tcp in [metrics] must be true or false")
            default:
                throw DaemonConfig.ParseError(line: n, message: "unknown key \(setting.key) in [metrics] (listen, allow_tcp, group)")
            }
        }
        if case .tcp = listen, !allowTCP {
            throw DaemonConfig.ParseError(line: line, message: "[metrics] listen names a TCP port, which every local user can connect to (and read the lock state and the timing of every call): set allow_tcp = true as well to mean it, or listen on a Unix socket")
        }
        if group != nil {
            guard case .unix = listen else {
                throw DaemonConfig.ParseError(line: line, message: "group in [metrics] is for a Unix socket listener (listen = \"unix:/path\")")
            }
        }
    }
}
