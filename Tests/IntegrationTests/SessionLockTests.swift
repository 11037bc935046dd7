import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Session events lock the right keychain (docs/security.md, "Lock events"): the real daemon on
/// a private system bus, with a stand-in for systemd-logind that owns org.freedesktop.login1.
@Suite("Session locks and suspend")
struct SessionLockTests {
    let passcode = bytes("1234")
    /// Sessions the stand-in serves: one of the uid the tests (and so the daemon) run as, one
    /// of another user.
    static let ownSession = "_1"
    static let otherSession = "_2"
    static let otherUID: UInt32 = 4242

    /// A bus, logind on it and an unlocked daemon with a passcode, watching with `setting`
    /// (nil: the key unset).
    struct Host {
        let bus: PrivateSystemBus
        let login1: FakeLogin1
        let daemon: RunningDaemon
        let client: KeychainConnection

        init(setting: String? = "own-sessions", passcode: [UInt8]) throws {
            bus = try PrivateSystemBus()
            login1 = try FakeLogin1(on: bus, sessions: [ownSession: getuid(), otherSession: otherUID])
            daemon = try RunningDaemon(config: setting.map { "lock_on_session_events = \"\($0)\"" } ?? "",
                                       environment: bus.environment)
            client = KeychainConnection(socketPath: daemon.socketPath)
            try client.setPasscode(passcode)
            try client.unlock(passcode: passcode)
            if setting != "off" && !(setting == nil && getuid() == 0) {
                try waitUntil(timeout: 10, "the daemon's subscription") { daemon.log.contains("watching systemd-logind") }
            }
        }

        var state: AttributeValue? { get throws { try client.status()["state"] } }

        /// Has logind lock the other user's session and waits until the daemon has handled it:
        /// the daemon handles signals in order, so whatever was sent before has been handled too.
        func passAnotherUsersLock() throws {
            let before = daemon.log.components(separatedBy: "not this daemon's user").count
            login1.lock(session: otherSession)
            try waitUntil(timeout: 10, "the other user's lock to be ignored") {
                daemon.log.components(separatedBy: "not this daemon's user").count > before
            }
        }
    }

    @Test func aLockOfASessionOfTheDaemonsUserLocksIt() throws {
        let host = try Host(passcode: passcode)
        host.login1.lock(session: Self.ownSession)
        try waitUntil(timeout: 10, "the lock") { try host.state == .string("locked") }
        #expect(host.daemon.log.contains("session /org/freedesktop/login1/session/\(Self.ownSession) of uid \(getuid()) locked"))
    }

    @Test func aLockOfAnotherUsersSessionLeavesItUnlocked() throws {
        let host = try Host(passcode: passcode)
        try host.passAnotherUsersLock()
        #expect(try host.state == .string("unlocked"))
    }

    @Test func suspendLocksItAndTheResumeDoesNot() throws {
        let host = try Host(passcode: passcode)
        host.login1.prepareForSleep(false)
        try host.passAnotherUsersLock()
        #expect(try host.state == .string("unlocked"))
        host.login1.prepareForSleep(true)
        try waitUntil(timeout: 10, "the lock") { try host.state == .string("locked") }
        #expect(host.daemon.log.contains("going to sleep"))
    }

    /// Any client of the system bus may send a signal named Session.Lock; only logind's count.
    @Test func aLockSignalFromAnotherBusClientIsIgnored() throws {
        let host = try Host(passcode: passcode)
        let forged = try runExecutable("/usr/bin/gdbus", [
            "emit", "--system", "--object-path", "/org/freedesktop/login1/session/\(Self.ownSession)",
            "--signal", "org.freedesktop.login1.Session.Lock",
        ], environment: host.bus.environment, input: [])
        #expect(forged.status == 0, "\(forged.stderr)")
        try host.passAnotherUsersLock()
        #expect(try host.state == .string("unlocked"))
    }

    @Test func offIgnoresTheDaemonsOwnSessionsAndSuspend() throws {
        let host = try Host(setting: "off", passcode: passcode)
        host.login1.lock(session: Self.ownSession)
        host.login1.prepareForSleep(true)
        usleep(500_000)  // nothing to wait for: the daemon is not on the bus
        #expect(try host.state == .string("unlocked"))
        #expect(host.daemon.log.contains("lock_on_session_events = off"))
    }

    /// The system daemon runs as root (or as its own system user, who has no sessions): root
    /// logging in and locking a console must not lock what serves every service.
    @Test(.enabled(if: getuid() == 0)) func rootsDaemonIgnoresSessionEventsUnlessTold() throws {
        let host = try Host(setting: nil, passcode: passcode)
        host.login1.lock(session: Self.ownSession)
        host.login1.prepareForSleep(true)
        usleep(500_000)
        #expect(try host.state == .string("unlocked"))
        #expect(host.daemon.log.contains("lock_on_session_events = off"))
    }

    @Test func withoutASystemBusTheDaemonServesAndSaysSo() throws {
        let d = try RunningDaemon(config: "lock_on_session_events = \"own-sessions\"",
                                  environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/system_bus_socket"])
        try waitUntil(timeout: 10, "the notice") { d.log.contains("session locks and suspend will not lock the keychain") }
        _ = try KeychainConnection(socketPath: d.socketPath).status()
    }
}

/// The default for a user's daemon, run as a real non-root user: it watches its own sessions.
@Suite("A user's daemon and session locks", .enabled(if: getuid() == 0))
struct UserDaemonSessionLockTests {
    @Test func aUsersDaemonLocksOnItsOwnSessionAndNotOnRoots() throws {
        let user = try MultiUserTests.user("kcsession")
        let bus = try PrivateSystemBus()
        let login1 = try FakeLogin1(on: bus, sessions: ["_1": 0, "_3": user])
        let daemon = try UserDaemon(uid: user, environment: bus.environment)
        let client = KeychainConnection(socketPath: daemon.socketPath, trust: ServerTrust(named: user))
        try client.setPasscode(bytes("1234"))
        try client.unlock(passcode: bytes("1234"))
        try waitUntil(timeout: 10, "the subscription") { daemon.log.contains("session of uid \(user), or suspend") }
        login1.lock(session: "_1")
        try waitUntil(timeout: 10, "root's lock to be ignored") { daemon.log.contains("of uid 0 locked: not this daemon's user") }
        #expect(try client.status()["state"] == .string("unlocked"))
        login1.lock(session: "_3")
        try waitUntil(timeout: 10, "the lock") { try client.status()["state"] == .string("locked") }
    }

    /// keychaind as `uid` through setpriv, with no lock_on_session_events in its config, its
    /// state and socket in directories that user owns.
    final class UserDaemon {
        let root: String
        let socketPath: String
        let logPath: String
        let process = Process()

        init(uid: UInt32, environment: [String: String]) throws {
            var template = Array("/tmp/kcu.XXXXXX".utf8CString)
            guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
            root = String(cString: p)
            chmod(root, 0o755)
            for directory in ["state", "run"] {
                mkdir(root + "/" + directory, 0o700)
                chown(root + "/" + directory, uid, uid)
            }
            socketPath = root + "/run/s.sock"
            logPath = root + "/daemon.log"
            try "lock_grace_seconds = 0\nlog_level = \"debug\"\n".write(toFile: root + "/keychaind.toml", atomically: true, encoding: .utf8)
            FileManager.default.createFile(atPath: logPath, contents: nil)
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", Binaries.keychaind,
                                 "--state-dir", root + "/state", "--socket", socketPath, "--config", root + "/keychaind.toml"]
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
                .merging(["KEYCHAIND_INSECURE_FAST_KDF": "1"]) { $1 }
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
            process.standardError = log
            process.standardOutput = log
            try process.run()
            let socketPath = socketPath, process = process, logPath = logPath, trust = ServerTrust(named: uid)
            try waitUntil(timeout: 20, "the daemon") {
                guard process.isRunning else {
                    throw KeychainError(.serviceNotAvailable, "keychaind exited: \((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")")
                }
                return (try? KeychainConnection(socketPath: socketPath, trust: trust).status()) != nil
            }
        }

        deinit {
            if process.isRunning {
                process.terminate()
                process.waitUntilExit()
            }
            try? FileManager.default.removeItem(atPath: root)
        }

        var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    }
}
