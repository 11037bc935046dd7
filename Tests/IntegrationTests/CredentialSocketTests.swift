import Foundation
import KeychainClient
import KeychainModel
import Testing

/// systemd's LoadCredential= served from the keychain, against the real daemon: a python process
/// plays systemd's set-up process as systemd 252 does it (its end bound to the abstract address
/// "\0RANDOM/unit/UNIT/ID", connect, shutdown of its writing side, read to EOF), in a real
/// cgroup named as systemd names the unit's (docs/credentials.md). Under real systemd:
/// scripts/boot-checks/credentials.
@Suite("LoadCredential= from the credential socket", .serialized)
struct CredentialSocketTests {
    /// Prints what systemd would store: the credential's bytes, or "refused" when the answer is
    /// over systemd's 1 MiB limit (its read then fails and the unit does not start), or
    /// "empty" for an EOF with nothing (an empty credential, which must never happen).
    static let systemd = """
        import os, socket, sys
        path, unit, cred = sys.argv[1:4]
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(b"\\0" + os.urandom(8).hex().encode() + b"/unit/" + unit.encode() + b"/" + cred.encode())
        s.connect(path)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk: break
            data += chunk
        print("refused" if len(data) > 1 << 20 else ("empty" if not data else data.decode()))
        """

    let name = "kccred-\(getpid())"

    /// Plays systemd's set-up process of `unit` asking for `id`, in `cgroup` (as `uid`).
    func load(_ id: String, of unit: String, from d: RunningDaemon, in cgroup: UnitIdentityTests.Cgroup,
              asUser uid: UInt32? = nil) throws -> String {
        let drop = uid.map { "exec /usr/bin/setpriv --reuid=\($0) --regid=\($0) --clear-groups " } ?? "exec "
        let script = "echo $$ > \(cgroup.directory)/cgroup.procs && \(drop)/usr/bin/python3 -c \"$0\" \"$1\" \"$2\" \"$3\""
        let r = try runExecutable("/bin/sh", ["-c", script, Self.systemd, d.root + "/credentials.sock", unit, id],
                                  environment: ["PATH": "/usr/bin:/bin"], input: [])
        return r.text.trimmingCharacters(in: .newlines) + r.stderr
    }

    func daemon(_ extra: String = "") throws -> RunningDaemon {
        let d = try RunningDaemon(config: "", start: false)
        let defaults = try String(contentsOfFile: d.configPath, encoding: .utf8)
        try (defaults + """
            credential_socket = "\(d.root)/credentials.sock"
            admin_uids = [0]
            \(extra)
            [[app]]
            id = "web"
            units = ["\(name).service"]
            groups = ["web"]
            [[app]]
            id = "operator"
            uids = [0]
            groups = ["web", "other", "nobody"]
            """).write(toFile: d.configPath, atomically: true, encoding: .utf8)
        try d.start()
        return d
    }

    func store(_ secret: String, unit: String, id: String, group: String = "web", in d: RunningDaemon) throws {
        _ = try KeychainConnection(socketPath: d.socketPath).add([
            "class": .string("genp"), "svce": .string("systemd-credential:\(unit)"), "acct": .string(id),
            "agrp": .string(group), "v_Data": .data(Array(secret.utf8)),
        ])
    }

    @Test func theUnitsSetUpProcessReadsItsCredential() throws {
        let d = try daemon()
        try store("s3cret-token", unit: "\(name).service", id: "token", in: d)
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name).service")
        #expect(try load("token", of: "\(name).service", from: d, in: unit) == "s3cret-token", "\(d.log)")
        #expect(d.log.contains("served credential token of \(name).service"))
        #expect(!d.log.contains("s3cret-token"))
    }

    @Test func aMissingItemFailsTheUnitRatherThanGivingItNothing() throws {
        let d = try daemon()
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name).service")
        #expect(try load("absent", of: "\(name).service", from: d, in: unit) == "refused")
        #expect(d.log.contains("refused credential absent of \(name).service"), "\(d.log)")
    }

    @Test func aLockedClassFailsTheUnit() throws {
        let d = try daemon()
        try store("s3cret-token", unit: "\(name).service", id: "token", in: d)
        let admin = KeychainConnection(socketPath: d.socketPath)
        try admin.setPasscode(Array("passcode-1".utf8))
        try admin.lock()
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name).service")
        #expect(try load("token", of: "\(name).service", from: d, in: unit) == "refused")
        #expect(d.log.contains("InteractionNotAllowed") || d.log.contains("-25308"), "\(d.log)")
        #expect(!d.log.contains("s3cret-token"))
    }

    @Test func aUnitNoAppNamesGetsNothing() throws {
        let d = try daemon()
        try store("s3cret-token", unit: "\(name)-unnamed.service", id: "token", group: "other", in: d)
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name)-unnamed.service")
        #expect(try load("token", of: "\(name)-unnamed.service", from: d, in: unit) == "refused")
    }

    @Test func aUnitGetsOnlyItemsOfItsOwnGroups() throws {
        let d = try daemon()
        try store("not-for-web", unit: "\(name).service", id: "token", group: "other", in: d)
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name).service")
        #expect(try load("token", of: "\(name).service", from: d, in: unit) == "refused")
    }

    @Test func aNonRootProcessInTheUnitBindingItsAddressGetsNothing() throws {
        let d = try daemon()
        try store("s3cret-token", unit: "\(name).service", id: "token", in: d)
        chmod(d.root + "/credentials.sock", 0o666)
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name).service")
        #expect(try load("token", of: "\(name).service", from: d, in: unit, asUser: 65534) == "refused")
        #expect(d.log.contains("is not that unit's set-up process"), "\(d.log)")
    }

    @Test func rootOutsideTheUnitItsAddressNamesGetsNothing() throws {
        let d = try daemon()
        try store("s3cret-token", unit: "\(name).service", id: "token", in: d)
        let elsewhere = try UnitIdentityTests.Cgroup("/system.slice/\(name)-other.service")
        #expect(try load("token", of: "\(name).service", from: d, in: elsewhere) == "refused")
    }

    @Test func aUserUnitGetsWhatItsUserCouldRead() throws {
        let d = try daemon("""
            [[app]]
            id = "nobody"
            uids = [65534]
            groups = ["nobody"]
            """)
        chmod(d.root + "/credentials.sock", 0o666)
        try store("user-token", unit: "\(name).service", id: "token", group: "other", in: d)
        let own = try UnitIdentityTests.Cgroup("/user.slice/user-65534.slice/user@65534.service/app.slice/\(name).service")
        // The name matches a system unit's app, but a user unit gets its uid's groups alone.
        #expect(try load("token", of: "\(name).service", from: d, in: own, asUser: 65534) == "refused")
        try store("nobody-token", unit: "\(name).service", id: "token", group: "nobody", in: d)
        #expect(try load("token", of: "\(name).service", from: d, in: own, asUser: 65534) == "nobody-token", "\(d.log)")
        // Root in that user's unit is not that user's set-up process.
        #expect(try load("token", of: "\(name).service", from: d, in: own) == "refused")
    }

    @Test func anAddressOfAnotherShapeGetsNothing() throws {
        let d = try daemon()
        let unit = try UnitIdentityTests.Cgroup("/system.slice/\(name).service")
        #expect(try load("a/b", of: "\(name).service", from: d, in: unit) == "refused")
    }
}
