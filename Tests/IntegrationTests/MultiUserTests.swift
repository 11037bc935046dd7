import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Real Unix users (created with useradd; the tests run as root, as CI does) talking to one
/// system daemon, confined by the [[app]] entries of its config.
@Suite("Access groups between real users", .serialized)
struct MultiUserTests {
    /// The uid of `name`, created first as a system user if there is none. Retried: useradd
    /// refuses while another test holds the passwd lock.
    static func user(_ name: String) throws -> UInt32 {
        for _ in 0..<50 {
            if let pw = getpwnam(name) { return pw.pointee.pw_uid }
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/sbin/useradd")
            p.arguments = ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
            if let pw = getpwnam(name) { return pw.pointee.pw_uid }
            usleep(100_000)
        }
        throw KeychainError(.io, "useradd \(name) failed")
    }

    let appA: UInt32
    let appB: UInt32
    let stranger: UInt32

    init() throws {
        appA = try Self.user("kcapp-a")
        appB = try Self.user("kcapp-b")
        stranger = try Self.user("kcapp-c")
    }

    func config(shared: Bool = true, extra: String = "") -> String {
        """
        socket_mode = "0666"
        admin_uids = [0]
        \(extra)
        [[app]]
        id = "app.a"
        uids = [\(appA)]
        groups = ["a.private"\(shared ? ", \"shared\"" : "")]

        [[app]]
        id = "app.b"
        uids = [\(appB)]
        groups = ["b.private", "shared"]
        """
    }

    let secretItem = ["--service", "db", "--account", "owner"]

    @Test func anAppCannotReadListUpdateOrDeleteAnothersPrivateItems() throws {
        let d = try RunningDaemon(config: config())
        #expect(try d.cli(["add"] + secretItem, input: bytes("A's secret"), asUser: appA).status == Exit.success)
        #expect(try d.cli(["get"] + secretItem, asUser: appB).status == Exit.notFound)
        #expect(try d.cli(["list", "--json"], asUser: appB).text.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
        #expect(try d.cli(["update", "--keep-secret", "--label", "x"] + secretItem, asUser: appB).status == Exit.notFound)
        #expect(try d.cli(["delete"] + secretItem, asUser: appB).status == Exit.notFound)
        let named = try d.cli(["get", "--access-group", "a.private"] + secretItem, asUser: appB)
        #expect(named.status == Exit.denied)
        #expect(named.stderr.contains("a.private"))
        #expect(try d.cli(["get"] + secretItem, asUser: appA).stdout == bytes("A's secret"))
        #expect(try d.cli(["list"], asUser: appA).text.contains("a.private"))
    }

    @Test func bothAppsUseTheSharedGroup() throws {
        let d = try RunningDaemon(config: config())
        let token = ["--service", "api", "--account", "shared-token", "--access-group", "shared"]
        #expect(try d.cli(["add"] + token, input: bytes("v1"), asUser: appA).status == Exit.success)
        #expect(try d.cli(["get"] + token, asUser: appB).stdout == bytes("v1"))
        #expect(try d.cli(["update"] + token, input: bytes("v2"), asUser: appB).status == Exit.success)
        #expect(try d.cli(["get", "--service", "api", "--account", "shared-token"], asUser: appA).stdout == bytes("v2"))
    }

    @Test func itemsWithoutAGroupGoToTheAppsFirstGroup() throws {
        let d = try RunningDaemon(config: config())
        _ = try d.cli(["add"] + secretItem, input: bytes("x"), asUser: appB)
        #expect(try d.cli(["get", "--json"] + secretItem, asUser: appB).text.contains("\"agrp\":\"b.private\""))
    }

    @Test func aUidThatMatchesNoApplicationIsRefused() throws {
        let d = try RunningDaemon(config: config())
        let r = try d.cli(["list"], asUser: stranger)
        #expect(r.status == Exit.denied)
        #expect(r.stderr.contains("uid \(stranger)"))
        #expect(r.stderr.contains(d.configPath))
    }

    @Test func nonAdminsCannotLockUnlockOrManageThePasscode() throws {
        let d = try RunningDaemon(config: config())
        #expect(try d.cli(["passcode", "set"], input: bytes("1234\n")).status == Exit.success)  // root
        for args in [["lock"], ["unlock"], ["passcode", "change"], ["passcode", "remove"]] {
            #expect(try d.cli(args, input: bytes("1234\n5678\n"), asUser: appA).status == Exit.denied, "\(args)")
        }
        #expect(try d.cli(["status"], asUser: appA).text.contains("passcode: true"))
    }

    @Test func anExecutableListNarrowsTheApplication() throws {
        let d = try RunningDaemon(config: config(extra: "") + """

            [[app]]
            id = "app.tool"
            uids = [\(stranger)]
            executables = ["\(Binaries.keychain)"]
            groups = ["tool"]
            """)
        #expect(try d.cli(["add"] + secretItem, input: bytes("t"), asUser: stranger).status == Exit.success)
        // The same uid through another executable (a copy of the CLI elsewhere) is not the app.
        let copy = d.root + "/other-keychain"
        try FileManager.default.copyItem(atPath: Binaries.keychain, toPath: copy)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        p.arguments = ["--reuid=\(stranger)", "--regid=\(stranger)", "--clear-groups", copy, "get"] + secretItem
        p.environment = ["KEYCHAIN_SOCKET": d.socketPath]
        p.standardError = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == Exit.denied)
    }

    @Test func sighupReloadsTheConfigAndABadOneKeepsTheOld() throws {
        let d = try RunningDaemon(config: config(shared: false))
        let shared = ["--service", "s", "--account", "a", "--access-group", "shared"]
        #expect(try d.cli(["add"] + shared, input: bytes("x"), asUser: appA).status == Exit.denied)
        try config(shared: true).write(toFile: d.configPath, atomically: true, encoding: .utf8)
        kill(d.pid, SIGHUP)
        var status: Int32 = -1
        for _ in 0..<100 {
            status = try d.cli(["add"] + shared, input: bytes("x"), asUser: appA).status
            if status == Exit.success { break }
            usleep(20_000)
        }
        #expect(status == Exit.success)
        try "[[app]]\nid = \"broken\"\n".write(toFile: d.configPath, atomically: true, encoding: .utf8)
        kill(d.pid, SIGHUP)
        usleep(200_000)
        #expect(d.log.contains("config reload failed"))
        #expect(try d.cli(["get"] + shared, asUser: appA).stdout == bytes("x"))  // the old policy still serves
    }

    @Test func sighupStartsAndStopsTheAuditLog() throws {
        let path = "/tmp/kc-audit-reload-\(getpid()).jsonl"
        defer { unlink(path) }
        let d = try RunningDaemon(config: config())
        _ = try d.cli(["list"], asUser: appA)
        try (config(extra: "audit_log = \"\(path)\"") + "\n").write(toFile: d.configPath, atomically: true, encoding: .utf8)
        kill(d.pid, SIGHUP)
        var lines = 0
        for _ in 0..<100 {
            _ = try d.cli(["list"], asUser: appA)
            lines = ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").count
            if lines > 0 { break }
            usleep(20_000)
        }
        #expect(lines > 0)
        #expect(d.log.contains("audit log: \(path)"))
    }

    @Test func theAuditLogRecordsCallsWithoutSecretsOrNames() throws {
        let d = try RunningDaemon(config: config(extra: "audit_log = \"AUDIT\"").replacingOccurrences(of: "AUDIT", with: "/tmp/kc-audit-\(getpid()).jsonl"))
        let path = "/tmp/kc-audit-\(getpid()).jsonl"
        defer { unlink(path) }
        let secret = "AUDIT-NEVER-SEES-THIS"
        _ = try d.cli(["add"] + secretItem, input: bytes(secret), asUser: appA)
        _ = try d.cli(["get"] + secretItem, asUser: appA)
        _ = try d.cli(["get", "--access-group", "a.private"] + secretItem, asUser: appB)  // denied
        _ = try d.cli(["list"], asUser: stranger)                                          // refused
        d.stop()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(lines.allSatisfy { $0 != nil })
        // `keychain add` asks for the lock state before it reads the secret: that status call
        // is audited too, before the add.
        #expect(lines.first??["op"] as? String == "status")
        let records = lines.compactMap { $0 }.filter { $0["op"] as? String != "status" }
        #expect(records.count == 4)
        #expect(records[0]["op"] as? String == "add")
        #expect(records[0]["app"] as? String == "app.a")
        #expect(records[0]["uid"] as? Int == Int(appA))
        #expect(records[0]["class"] as? String == "genp")
        #expect(records[0]["group"] as? String == "a.private")
        #expect(records[0]["status"] as? Int == 0)
        #expect(records[0]["time"] as? String != nil && records[0]["pid"] as? Int != nil)
        #expect(records[1]["op"] as? String == "copyMatching" && records[1]["group"] as? String == "*")
        #expect(records[2]["status"] as? Int == -34018 && records[2]["app"] as? String == "app.b")
        #expect(records[3]["status"] as? Int == -34018 && records[3]["app"] as? String == "unknown")
        #expect(!text.contains(secret))
        #expect(!text.contains("\"db\"") && !text.contains("owner"))
        #expect(try mode(path) == 0o600)
    }

    @Test func aFailingAuditLogDoesNotStopTheKeychain() throws {
        // /dev/full fails every write with ENOSPC, as a full disk would.
        let d = try RunningDaemon(config: config(extra: "audit_log = \"/dev/full\""))
        #expect(try d.cli(["add"] + secretItem, input: bytes("s"), asUser: appA).status == Exit.success)
        #expect(try d.cli(["get"] + secretItem, asUser: appA).stdout == bytes("s"))
        #expect(d.log.contains("audit log write failed"))
    }

    @Test func theAuditLogCarriesNamesWhenAsked() throws {
        let path = "/tmp/kc-audit-names-\(getpid()).jsonl"
        defer { unlink(path) }
        let d = try RunningDaemon(config: config(extra: "audit_log = \"\(path)\"\naudit_include_names = true"))
        _ = try d.cli(["add"] + secretItem, input: bytes("s"), asUser: appA)
        d.stop()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.contains("\"service\":\"db\"") && text.contains("\"account\":\"owner\""))
        #expect(!text.contains("\"s\""))
    }

    func mode(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1
    }
}
