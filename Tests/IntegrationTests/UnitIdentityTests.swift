import Foundation
import KeychainModel
import Testing

/// Callers told apart by their systemd unit, against the real daemon: the clients are put in
/// real cgroups named as systemd names them (the test machine need not run systemd; root may
/// make cgroups on the cgroup2 hierarchy), and keychaind reads their cgroup at accept
/// (docs/security.md, "Units").
@Suite("A caller is its systemd unit", .serialized)
struct UnitIdentityTests {
    /// Where cgroup2 is mounted: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid system.
    static func cgroupRoot() throws -> String {
        let mounts = try String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8)
        for line in mounts.split(separator: "\n") {
            let halves = line.components(separatedBy: " - ")
            guard halves.count == 2, halves[1].hasPrefix("cgroup2 ") else { continue }
            return halves[0].split(separator: " ")[4].description
        }
        throw KeychainError(.io, "no cgroup2 hierarchy is mounted")
    }

    /// A cgroup at `path` below the root, removed (once empty) when the test ends.
    final class Cgroup {
        let directory: String
        init(_ path: String) throws {
            directory = try UnitIdentityTests.cgroupRoot() + path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }
        deinit {
            // Deepest first; the slices made for the test only when nothing else is in them.
            var d = directory
            while d.count > 1, rmdir(d) == 0 { d = (d as NSString).deletingLastPathComponent }
        }
    }

    /// Runs the python client of CallerIdentityTests in `cgroup` (as `uid`, and non-dumpable
    /// with `hidden`): one status per request, the add then the read.
    func runClient(in cgroup: Cgroup, _ d: RunningDaemon, asUser uid: UInt32? = nil, hidden: Bool = false) throws -> [String] {
        let code = hidden ? CallerIdentityTests.hiddenClient : CallerIdentityTests.client
        let drop = uid.map { "exec /usr/bin/setpriv --reuid=\($0) --regid=\($0) --clear-groups " } ?? "exec "
        let script = "echo $$ > \(cgroup.directory)/cgroup.procs && \(drop)/usr/bin/python3 -c \"$0\" first \(d.socketPath)"
        let r = try runExecutable("/bin/sh", ["-c", script, code], environment: ["PATH": "/usr/bin:/bin"], input: [])
        return r.text.split(separator: "\n").map(String.init)
    }

    static let refused = String(KeychainStatus.missingEntitlement.rawValue)
    let name = "kctest-\(getpid())"

    @Test func aCallerInANamedSystemUnitIsThatApp() throws {
        let d = try RunningDaemon(config: """
            socket_mode = "0666"
            [[app]]
            id = "web"
            units = ["\(name).service"]
            groups = ["web"]
            """)
        let unit = try Cgroup("/system.slice/\(name).service")
        let other = try Cgroup("/system.slice/\(name)-other.service")
        #expect(try runClient(in: unit, d) == ["0", "0"], "\(d.log)")
        // Any uid of the unit is the app: nobody finds root's item there (the add is a duplicate).
        #expect(try runClient(in: unit, d, asUser: 65534) == [String(KeychainStatus.duplicateItem.rawValue), "0"])
        #expect(try runClient(in: other, d).first == Self.refused)
    }

    @Test func aProcessInADelegatedSubtreeIsStillItsUnit() throws {
        let d = try RunningDaemon(config: """
            [[app]]
            id = "builder"
            units = ["\(name).service"]
            groups = ["builder"]
            """)
        let inner = try Cgroup("/system.slice/\(name).service/payload/nginx.service")
        #expect(try runClient(in: inner, d) == ["0", "0"], "\(d.log)")
        let posing = try Cgroup("/system.slice/\(name)-delegated.service/\(name).service")
        #expect(try runClient(in: posing, d).first == Self.refused, "a subtree named like the unit is its own unit's")
    }

    @Test func aUserUnitIsItsUsersAlone() throws {
        let d = try RunningDaemon(config: """
            socket_mode = "0666"
            [[app]]
            id = "backup"
            uids = [65534]
            user_units = ["\(name).service"]
            groups = ["backup"]
            """)
        let own = try Cgroup("/user.slice/user-65534.slice/user@65534.service/app.slice/\(name).service")
        let anothers = try Cgroup("/user.slice/user-0.slice/user@0.service/app.slice/\(name).service")
        #expect(try runClient(in: own, d, asUser: 65534) == ["0", "0"], "\(d.log)")
        #expect(try runClient(in: own, d).first == Self.refused, "root in nobody's user unit is not nobody")
        #expect(try runClient(in: anothers, d).first == Self.refused)
    }

    @Test func aNonDumpableClientOfANamedUnitIsServed() throws {
        let d = try RunningDaemon(config: """
            admin_uids = [0]
            [[app]]
            id = "tool"
            uids = [0]
            executables = ["/usr/bin/true"]
            groups = ["tool"]
            [[app]]
            id = "agent"
            units = ["\(name).service"]
            groups = ["agent"]
            """, launcher: CallerIdentityTests.withoutPtrace)
        let unit = try Cgroup("/system.slice/\(name).service")
        #expect(try runClient(in: unit, d, hidden: true) == ["0", "0"], "\(d.log)")
        let outside = try Cgroup("/system.slice/\(name)-outside.service")
        let refused = try runClient(in: outside, d, hidden: true)
        #expect(refused.first == Self.refused)
    }
}
