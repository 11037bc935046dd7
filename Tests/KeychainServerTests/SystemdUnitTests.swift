import Testing
@testable import KeychainServer

/// A caller's systemd unit, read from its cgroup path (docs/security.md, "Units").
@Suite("The systemd unit of a cgroup")
struct SystemdUnitTests {
    @Test(arguments: [
        ("/system.slice/nginx.service", SystemdUnit.system("nginx.service")),
        ("/system.slice/system-getty.slice/getty@tty1.service", .system("getty@tty1.service")),
        ("/user.slice/user-1000.slice/session-3.scope", .system("session-3.scope")),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/backup.service", .user(uid: 1000, "backup.service")),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox-4242.scope", .user(uid: 1000, "app-gnome-firefox-4242.scope")),
        ("/user.slice/user-1000.slice/user@1000.service/init.scope", .user(uid: 1000, "init.scope")),
        ("/init.scope", .system("init.scope")),
    ])
    func aUnitIsTheFirstServiceOrScopeBelowTheSlices(path: String, unit: SystemdUnit) {
        #expect(SystemdUnit(cgroupPath: path) == unit)
    }

    @Test(arguments: [
        ("/system.slice/build.service/payload", SystemdUnit.system("build.service")),
        ("/system.slice/build.service/evil.slice/nginx.service", .system("build.service")),
        ("/system.slice/build.service/user@0.service/app.slice/x.service", .system("build.service")),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/podman.service/ctr/inner.service", .user(uid: 1000, "podman.service")),
    ])
    func aProcessInADelegatedSubtreeIsStillItsUnit(path: String, unit: SystemdUnit) {
        #expect(SystemdUnit(cgroupPath: path) == unit)
    }

    @Test(arguments: ["/", "", "/docker/4f1e2a", "/system.slice", "/user.slice/user-1000.slice",
                      "/user.slice/user-1000.slice/user@1000.service/made-by-the-user",
                      "/user.slice/user-1000.slice/user@1000.service", "/system.slice/.service"])
    func aPathOutsideAUnitNamesNone(path: String) {
        #expect(SystemdUnit(cgroupPath: path) == nil)
    }

    @Test func theUnifiedLineIsReadBeforeTheLegacyOne() {
        let hybrid = "12:pids:/system.slice/a.service\n1:name=systemd:/system.slice/legacy.service\n0::/system.slice/unified.service\n"
        #expect(SystemdUnit(cgroupFile: Array(hybrid.utf8)) == .system("unified.service"))
        let legacy = "4:memory:/x\n1:name=systemd:/system.slice/legacy.service\n0::/\n"
        #expect(SystemdUnit(cgroupFile: Array(legacy.utf8)) == .system("legacy.service"))
        #expect(SystemdUnit(cgroupFile: Array("0::/\n".utf8)) == nil)
    }

    @Test func aSystemUnitRuleMatchesAnyUIDOfThatUnitAndNoOtherUnit() {
        let policy = AccessPolicy(applications: [Application(id: "web", uids: [], units: ["nginx.service"], groups: ["web"])])
        #expect(policy.scope(for: Caller(pid: 1, uid: 33, gid: 33, executable: nil, unit: .system("nginx.service"))).groups == ["web"])
        #expect(policy.scope(for: Caller(pid: 1, uid: 0, gid: 0, executable: nil, unit: .system("nginx.service"))).groups == ["web"])
        #expect(policy.scope(for: Caller(pid: 1, uid: 33, gid: 33, executable: nil, unit: .system("apache2.service"))).groups == [])
        #expect(policy.scope(for: Caller(pid: 1, uid: 33, gid: 33, executable: nil, unit: .user(uid: 33, "nginx.service"))).groups == [])
        #expect(policy.scope(for: Caller(pid: 1, uid: 33, gid: 33, executable: nil)).groups == [])
    }

    @Test func aUserUnitRuleMatchesOnlyThatUsersOwnManager() {
        let policy = AccessPolicy(applications: [Application(id: "backup", uids: [1000], userUnits: ["backup.service"], groups: ["b"])])
        #expect(policy.scope(for: Caller(pid: 1, uid: 1000, gid: 1000, executable: nil, unit: .user(uid: 1000, "backup.service"))).groups == ["b"])
        #expect(policy.scope(for: Caller(pid: 1, uid: 1001, gid: 1001, executable: nil, unit: .user(uid: 1001, "backup.service"))).groups == [])
        #expect(policy.scope(for: Caller(pid: 1, uid: 1000, gid: 1000, executable: nil, unit: .user(uid: 1001, "backup.service"))).groups == [])
        #expect(policy.scope(for: Caller(pid: 1, uid: 1000, gid: 1000, executable: nil, unit: .system("backup.service"))).groups == [])
    }

    @Test(arguments: [
        ("[[app]]\nid = \"a\"\nuser_units = [\"b.service\"]\ngroups = [\"g\"]", 1, "any user can start"),
        ("[[app]]\nid = \"a\"\nunits = [\"nginx\"]\ngroups = [\"g\"]", 3, "services or scopes"),
        ("[[app]]\nid = \"a\"\nunits = [\"a/b.service\"]\ngroups = [\"g\"]", 3, "services or scopes"),
        ("[[app]]\nid = \"a\"\nunits = [\"web.slice\"]\ngroups = [\"g\"]", 3, "services or scopes"),
    ])
    func badUnitRulesAreRefusedWithTheirLine(text: String, line: Int, message: String) {
        do {
            _ = try DaemonConfig.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line, "\(error)")
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test func unitRulesAreRead() throws {
        let config = try DaemonConfig.parse("""
            [[app]]
            id = "web"
            units = ["nginx.service"]
            groups = ["web"]
            [[app]]
            id = "backup"
            uids = [1000]
            user_units = ["backup.service", "restic.service"]
            groups = ["backup"]
            """)
        #expect(config.applications[0].units == ["nginx.service"] && config.applications[0].uids.isEmpty)
        #expect(config.applications[1].userUnits == ["backup.service", "restic.service"])
        #expect(config.accessPolicy(source: "x").identifiesByUnit)
    }
}
