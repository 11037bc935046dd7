import DBus
import Foundation
import KeychainModel
import Testing

/// What a new user meets first, following README.md, docs/cli.md and the man pages (issue 25):
/// each step works as written, and each error says what to do next.
@Suite("A newcomer's first hour", .serialized)
struct NewcomerTests {
    let item = ["--service", "api.example.com", "--account", "alice"]

    /// A daemon with a passcode, locked, its grace period `grace` seconds.
    func lockedDaemon(grace: Int = 0) throws -> RunningDaemon {
        let d = try RunningDaemon(config: "lock_grace_seconds = \(grace)")
        #expect(try d.cli(["passcode", "set"], input: bytes("1234\n")).status == Exit.success)
        #expect(try d.cli(["lock"]).status == Exit.success)
        return d
    }

    // MARK: --trust-uid takes a user name, before or after the command

    @Test func trustUIDTakesAUserName() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        let r = try runExecutable(Binaries.keychain, ["status", "--trust-uid", "kcimpostor"],
                                  environment: ["KEYCHAIN_SOCKET": fake.socketPath, "PATH": "/usr/bin:/bin"], input: [])
        #expect(!r.stderr.contains("refusing to talk"), "\(r.stderr)")
        #expect(fake.bytesReceived > 0)
    }

    @Test func trustUIDIsAcceptedBeforeTheCommand() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        let r = try runExecutable(Binaries.keychain, ["--trust-uid", "\(impostor)", "status"],
                                  environment: ["KEYCHAIN_SOCKET": fake.socketPath, "PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status != Exit.usage, "\(r.stderr)")
        #expect(fake.bytesReceived > 0)
    }

    @Test func keychainTrustUIDTakesAUserName() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        _ = try runExecutable(Binaries.keychain, ["status"],
                              environment: ["KEYCHAIN_SOCKET": fake.socketPath, "KEYCHAIN_TRUST_UID": "kcimpostor", "PATH": "/usr/bin:/bin"],
                              input: [])
        #expect(fake.bytesReceived > 0)
    }

    @Test func theBridgeTakesAUserNameForTrustUID() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        let r = try runExecutable(Binaries.directory + "/keychain-secret-service", ["--trust-uid", "kcimpostor", "--socket", fake.socketPath],
                                  environment: ["PATH": "/usr/bin:/bin", "SWIFT_BACKTRACE": "enable=no"], input: [])
        #expect(r.status == 1)  // the impostor hangs up: no keychaind there
        #expect(!r.stderr.contains("not a numeric uid") && !r.stderr.contains("refusing to talk"), "\(r.stderr)")
        #expect(fake.bytesReceived > 0)
    }

    @Test func aTrustUIDThatNamesNobodyIsAUsageError() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["status", "--trust-uid", "no-such-user-kc25"])
        #expect(r.status == Exit.usage)
        #expect(r.stderr.contains("neither a numeric uid nor a user"))
    }

    // MARK: lock, status

    @Test func lockSaysHowLongWhenUnlockedItemsStayReadable() throws {
        let d = try lockedDaemon(grace: 30)
        _ = try d.cli(["unlock"], input: bytes("1234\n"))
        let r = try d.cli(["lock"])
        #expect(r.status == Exit.success)
        #expect(r.stderr.contains("stay readable for") && r.stderr.contains("grace period"), "\(r.stderr)")
    }

    @Test func lockWithoutAGracePeriodSaysItemsAreUnreadableNow() throws {
        let d = try RunningDaemon(config: "lock_grace_seconds = 0")
        _ = try d.cli(["passcode", "set"], input: bytes("1234\n"))
        let r = try d.cli(["lock"])
        #expect(r.status == Exit.success)
        #expect(r.stderr.contains("unreadable until `keychain unlock`"), "\(r.stderr)")
    }

    @Test func statusPrintsTheLockStateFirst() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["status"])
        #expect(r.text.hasPrefix("state: unlocked\n"), "\(r.text)")
    }

    // MARK: add: an empty secret, and what is checked before the secret is read

    @Test func anEmptySecretOnStandardInputIsRefused() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["add"] + item, input: [])
        #expect(r.status == Exit.usage)
        #expect(r.stderr.contains("the secret is empty") && r.stderr.contains("--allow-empty"), "\(r.stderr)")
        #expect(try d.cli(["get"] + item).status == Exit.notFound)
    }

    @Test func allowEmptyStoresAnEmptySecret() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["add", "--allow-empty"] + item, input: []).status == Exit.success)
        let got = try d.cli(["get"] + item)
        #expect(got.status == Exit.success && got.stdout.isEmpty)
    }

    @Test func twoEntersAtThePromptAreRefused() throws {
        let d = try RunningDaemon()
        let r = try onTerminal(d, "add --service s --account a", typing: ["", ""])
        #expect(r.status == Exit.usage)
        #expect(r.text.contains("nothing was typed"), "\(r.text)")
    }

    @Test func addOnALockedKeychainFailsBeforeAskingForTheSecret() throws {
        let d = try lockedDaemon()
        let r = try onTerminal(d, "add --service s --account a", typing: ["typed", "typed"])
        #expect(r.status == Exit.locked)
        #expect(!r.text.contains("Secret:"), "\(r.text)")
        #expect(r.text.contains("keychain unlock"))
    }

    @Test func anAlwaysItemIsAddedWhileLocked() throws {
        let d = try lockedDaemon()
        #expect(try d.cli(["add", "--accessible", "always"] + item, input: bytes("x")).status == Exit.success)
    }

    @Test func addToAGroupOutsideTheCallersRightsFailsBeforeAskingForTheSecret() throws {
        let d = try RunningDaemon()
        let r = try onTerminal(d, "add --service s --account a --access-group someone.else", typing: ["typed", "typed"])
        #expect(r.status == Exit.denied)
        #expect(!r.text.contains("Secret:"), "\(r.text)")
        #expect(r.text.contains("someone.else"))
    }

    // MARK: hints that name the command that fixes the situation

    @Test func certGetOfAMissingLabelPointsAtCertList() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["cert", "get", "--label", "nope"])
        #expect(r.status == Exit.notFound)
        #expect(r.stderr.contains("keychain cert list") && !r.stderr.contains("--service"), "\(r.stderr)")
    }

    @Test func aDuplicateCertificatePointsAtCertDeleteNotUpdate() throws {
        let d = try RunningDaemon()
        let der = CertificateTests.directory + "/p256.der"
        #expect(try d.cli(["cert", "add", der, "--label", "web"]).status == Exit.success)
        let r = try d.cli(["cert", "add", der, "--label", "web"])
        #expect(r.status == Exit.duplicate)
        #expect(r.stderr.contains("keychain cert delete") && !r.stderr.contains("keychain update"), "\(r.stderr)")
    }

    @Test func aThrottledUnlockDoesNotSayThePasscodeIsWrong() throws {
        let d = try lockedDaemon()
        for _ in 0..<5 { _ = try d.cli(["unlock"], input: bytes("wrong\n")) }
        let r = try d.cli(["unlock"], input: bytes("1234\n"))
        #expect(r.status == Exit.authFailed)
        #expect(!r.stderr.contains("not correct"), "\(r.stderr)")
        #expect(r.stderr.contains("then run `keychain unlock` again"))
    }

    @Test func aRefusedRootCallerIsToldTheConfigFileInForce() throws {
        let nobody: UInt32 = 65534
        var template = Array("/tmp/kcnew.XXXXXX".utf8CString)
        let root = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: root) }
        chmod(root, 0o755)
        let home = root + "/home"
        mkdir(home, 0o700)
        chown(home, nobody, nobody)
        let socket = home + "/s.sock"
        chmod(home, 0o711)  // root reaches the socket; the state inside is 0700
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        daemon.arguments = ["--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", Binaries.keychaind,
                            "--state-dir", home + "/state", "--socket", socket]
        daemon.environment = ["CONFIGURATION_DIRECTORY": root + "/etc", "KEYCHAIND_INSECURE_FAST_KDF": "1", "PATH": "/usr/bin:/bin"]
        daemon.standardError = FileHandle.nullDevice
        try daemon.run()
        defer { kill(daemon.processIdentifier, SIGKILL); daemon.waitUntilExit() }
        try waitUntil(timeout: 20, "keychaind to listen") { FileManager.default.fileExists(atPath: socket) }
        let r = try runExecutable(Binaries.keychain, ["--trust-uid", "nobody", "list"],
                                  environment: ["KEYCHAIN_SOCKET": socket, "PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status == Exit.denied)
        #expect(r.stderr.contains(root + "/etc/keychaind.toml") && !r.stderr.contains("in the built-in defaults"), "\(r.stderr)")
    }

    // MARK: keys

    @Test func keyGenerateRefusesALabelThatExists() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["key", "generate", "--type", "p256", "--label", "web-tls"]).status == Exit.success)
        let again = try d.cli(["key", "generate", "--type", "p256", "--label", "web-tls"])
        #expect(again.status == Exit.duplicate)
        #expect(again.stderr.contains("--allow-duplicate-label"))
        #expect(try d.cli(["key", "list"]).text.split(separator: "\n").count == 1)
    }

    @Test func allowDuplicateLabelMakesASecondKeyOfTheLabel() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["key", "generate", "--type", "p256", "--label", "web-tls"])
        #expect(try d.cli(["key", "generate", "--type", "p256", "--label", "web-tls", "--allow-duplicate-label"]).status == Exit.success)
        #expect(try d.cli(["key", "list"]).text.split(separator: "\n").count == 2)
    }

    @Test func sshAgentExitsUnreachableBeforeGoingToTheBackground() throws {
        let d = try RunningDaemon(start: false)
        let listen = d.root + "/agent/agent.sock"
        let r = try d.cli(["ssh-agent", "--listen", listen])
        #expect(r.status == Exit.unreachable)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("cannot reach keychaind"))
        #expect(!FileManager.default.fileExists(atPath: listen))
    }

    // MARK: backups

    @Test func theBackupSummaryNamesTheClassesAndWhatStayedBehind() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("x"))
        _ = try d.cli(["key", "generate", "--type", "ed25519", "--label", "laptop", "--ssh"])
        let r = try d.cli(["backup", "--out", d.root + "/backup.kcb"], input: bytes("backup password\n"))
        #expect(r.status == Exit.success, "\(r.stderr)")
        #expect(r.stderr.contains("backed up 1 item(s)") && r.stderr.contains("1 generic password(s)"), "\(r.stderr)")
        #expect(r.stderr.contains("1 non-extractable key(s) left out"))
    }

    // MARK: help and --json

    @Test func helpListsTheGlobalOptions() throws {
        let r = try runExecutable(Binaries.keychain, ["help"], environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(r.text.contains("--trust-uid") && r.text.contains("--json") && r.text.contains("--socket"), "\(r.text)")
    }

    @Test func aJSONErrorIsOnlyJSON() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["get", "--json"] + item)
        #expect(r.status == Exit.notFound)
        #expect(r.stderr.isEmpty, "\(r.stderr)")
        #expect(try JSONSerialization.jsonObject(with: Data(r.stdout)) is [String: Any])
    }

    // MARK: keychaind

    @Test func aConfigErrorPrintsNoUsageBlock() throws {
        let d = try RunningDaemon(config: "no_such_key = 1", start: false)
        let r = try runExecutable(Binaries.keychaind, ["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath],
                                  environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status == 78)
        #expect(r.stderr.contains("no_such_key"))
        #expect(!r.stderr.lowercased().contains("usage"), "\(r.stderr)")
    }

    @Test func aSecondKeychaindForABusySocketCreatesNoStateDirectory() throws {
        let d = try RunningDaemon()
        let other = d.root + "/other-state"
        let r = try runExecutable(Binaries.keychaind, ["--state-dir", other, "--socket", d.socketPath, "--config", d.configPath],
                                  environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status != 0)
        #expect(r.stderr.contains("already serving"))
        #expect(!FileManager.default.fileExists(atPath: other))
    }

    // MARK: keychain-secret-service --enable

    private static let bridge = Binaries.directory + "/keychain-secret-service"

    @Test func enableWritesTheSocketTheCLIUsesAndTheRunningBusStartsTheBridge() throws {
        let daemon = try RunningDaemon()
        let dataHome = daemon.root + "/data"
        let services = dataHome + "/dbus-1/services"
        // The bus starts before the services directory exists, as on a new account.
        let bus = try PrivateSystemBus(activationDirectory: services)
        let enabled = try runExecutable(Self.bridge, ["--enable"], environment: [
            "XDG_DATA_HOME": dataHome, "HOME": dataHome, "PATH": "/usr/bin:/bin",
            "KEYCHAIN_SOCKET": daemon.socketPath, "DBUS_SESSION_BUS_ADDRESS": bus.address,
        ], input: [])
        #expect(enabled.status == 0, "\(enabled.stderr)")
        #expect(enabled.text.contains("ReloadConfig"), "\(enabled.text)")
        let written = try String(contentsOfFile: services + "/org.freedesktop.secrets.service", encoding: .utf8)
        #expect(written.contains("Exec=\(Self.bridge) --socket \(daemon.socketPath)\n"))

        let environment = ["DBUS_SESSION_BUS_ADDRESS": bus.address, "PATH": "/usr/bin:/bin", "HOME": daemon.root]
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Enabled", "service", "enable"],
                                       environment: environment, input: bytes("at once"))
        #expect(stored.status == 0, "\(stored.stderr)")
        #expect(try daemon.cli(["list"]).text.contains("Enabled"))
        let owner = try BusConnection(address: bus.address).call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetConnectionUnixProcessID", arguments: [.string("org.freedesktop.secrets")]).readUInt32()
        kill(pid_t(owner), SIGTERM)
    }

    @Test func enableWithoutASocketWritesTheDefaultTheCLIWouldUse() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        // Not root, whose default socket is the system one: a user with XDG_RUNTIME_DIR.
        let nobody: UInt32 = 65534
        mkdir(dataHome, 0o700)
        chown(dataHome, nobody, nobody)
        let enabled = try runExecutable(Self.bridge, ["--enable"], environment: [
            "XDG_DATA_HOME": dataHome, "HOME": dataHome, "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": daemon.root,
        ], input: [], asUser: nobody)
        #expect(enabled.status == 0, "\(enabled.stderr)")
        let written = try String(contentsOfFile: dataHome + "/dbus-1/services/org.freedesktop.secrets.service", encoding: .utf8)
        #expect(written.contains(" --socket \(daemon.root)/keychaind.sock\n"), "\(written)")
    }

    @Test func theBridgeSaysOnceThatItCannotReachKeychaind() throws {
        let daemon = try RunningDaemon(start: false)
        let r = try runExecutable(Self.bridge, ["--socket", daemon.socketPath],
                                  environment: ["PATH": "/usr/bin:/bin", "SWIFT_BACKTRACE": "enable=no"], input: [])
        #expect(r.status == 1)
        #expect(r.stderr.components(separatedBy: "cannot reach keychaind").count == 2, "\(r.stderr)")
    }
}
