/// The systemd unit a process belongs to, read from its cgroup path (docs/security.md, "Who a
/// caller is: units"). systemd puts every process it starts in the cgroup of its unit, below the
/// slices: `/system.slice/nginx.service`, `/user.slice/user-1000.slice/session-3.scope`, and a
/// user manager's own units below its service, `/user.slice/user-1000.slice/user@1000.service/
/// app.slice/backup.service`. Only root (and, in its own subtree, a unit with Delegate=) can move
/// a process between cgroups, so the first unit on the path is where systemd put it.
public enum SystemdUnit: Sendable, Equatable, CustomStringConvertible {
    /// A unit of the system manager ("nginx.service", "session-3.scope").
    case system(String)
    /// A unit of the user manager `user@uid.service`.
    case user(uid: UInt32, String)

    /// The unit of a /proc/PID/cgroup file: its cgroup v2 line ("0::PATH"), else the
    /// name=systemd line of a v1 hierarchy. nil outside systemd (a container's "0::/").
    public init?(cgroupFile bytes: [UInt8]) {
        let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n")
        let unified = lines.first { $0.hasPrefix("0::") }.map { String($0.dropFirst(3)) }
        let legacy = lines.lazy.compactMap { line -> String? in
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            return fields.count == 3 && fields[1] == "name=systemd" ? String(fields[2]) : nil
        }.first
        guard let path = unified.flatMap({ $0 == "/" ? nil : $0 }) ?? legacy,
              let unit = Self(cgroupPath: path) else { return nil }
        self = unit
    }

    /// The unit of a cgroup path. The first component that is not a slice is the unit: what a
    /// delegated unit creates below its own cgroup (any names, ".service" ones too) stays that
    /// unit's. Below a user manager (user@UID.service, whose subtree its user may write), the
    /// first unit there is the user unit; a cgroup of the user's making that is not a unit
    /// there names nothing, rather than the manager itself.
    public init?(cgroupPath path: String) {
        var components = path.split(separator: "/").drop { $0.hasSuffix(".slice") }
        guard let first = components.popFirst(), Self.isProcessUnit(first) else { return nil }
        guard let uid = Self.userManagerUID(first) else {
            self = .system(String(first))
            return
        }
        guard let inner = components.drop(while: { $0.hasSuffix(".slice") }).first, Self.isProcessUnit(inner) else { return nil }
        self = .user(uid: uid, String(inner))
    }

    /// Services and scopes hold processes; slices only group them.
    static func isProcessUnit(_ name: Substring) -> Bool {
        (name.hasSuffix(".service") || name.hasSuffix(".scope")) && !name.hasPrefix(".")
    }

    /// The uid of "user@UID.service".
    static func userManagerUID(_ name: Substring) -> UInt32? {
        guard name.hasPrefix("user@"), name.hasSuffix(".service") else { return nil }
        return UInt32(name.dropFirst("user@".count).dropLast(".service".count))
    }

    public var description: String {
        switch self {
        case .system(let name): name
        case .user(let uid, let name): "\(name) of user@\(uid).service"
        }
    }
}
