import Foundation
import KeychainModel
import Testing

/// Another local user creates the socket first and listens: clients must not send it a
/// secret or a passcode (docs/security.md, "Who answers on the socket").
@Suite("Clients talk only to a daemon they trust", .serialized)
struct ServerTrustTests {
    let impostor: UInt32
    let client: UInt32

    init() throws {
        impostor = try MultiUserTests.user("kcimpostor")
        client = try MultiUserTests.user("kcclient")
    }

    /// A listener run by the impostor's uid that appends every byte it receives to a file,
    /// then hangs up.
    final class Impostor {
        let directory: String
        let socketPath: String
        let received: String
        let process: Process

        init(uid: UInt32, socketPath explicitPath: String? = nil) throws {
            var template = Array("/tmp/kcimp.XXXXXX".utf8CString)
            guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
            directory = String(cString: p)
            chown(directory, uid, uid)
            chmod(directory, 0o755)
            socketPath = explicitPath ?? directory + "/kc.sock"
            received = directory + "/received"
            let script = """
            import os, socket, sys
            path, log = sys.argv[1], sys.argv[2]
            open(log, "wb").close()
            s = socket.socket(socket.AF_UNIX)
            s.bind(path)
            os.chmod(path, 0o777)
            s.listen(16)
            while True:
                c, _ = s.accept()
                c.settimeout(2)
                try:
                    data = c.recv(1 << 20)
                except OSError:
                    data = b""
                with open(log, "ab") as f:
                    f.write(data)
                c.close()
            """
            process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/python3", "-c", script,
                                 socketPath, received]
            try process.run()
            for _ in 0..<200 where !FileManager.default.fileExists(atPath: socketPath) { usleep(20_000) }
            usleep(50_000)
        }

        var bytesReceived: Int { (try? Data(contentsOf: URL(fileURLWithPath: received)).count) ?? -1 }

        deinit {
            kill(process.processIdentifier, SIGKILL)  // SIGTERM may be blocked in what it inherits
            process.waitUntilExit()
            unlink(socketPath)
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    /// Runs a built executable as `uid` with exactly `environment` (plus PATH and HOME).
    func run(_ executable: String, _ arguments: [String], environment: [String: String], input: [UInt8],
             asUser uid: UInt32) throws -> CLIResult {
        try runExecutable(executable, arguments, environment: environment.merging(["PATH": "/usr/bin:/bin", "HOME": "/"]) { a, _ in a },
                          input: input, asUser: uid)
    }

    let secret = bytes("the-secret-nobody-else-may-see")

    @Test func theCLIRefusesASocketServedByAnotherUserBeforeSendingTheSecret() throws {
        let fake = try Impostor(uid: impostor)
        let add = try run(Binaries.keychain, ["add", "--service", "db", "--account", "me"],
                          environment: ["KEYCHAIN_SOCKET": fake.socketPath], input: secret, asUser: client)
        #expect(add.status == 7)  // keychaind unreachable
        #expect(add.stderr.contains("served by uid \(impostor) (kcimpostor)"))
        #expect(add.stderr.contains("KEYCHAIN_TRUST_UID=\(impostor)"))
        let unlock = try run(Binaries.keychain, ["unlock"], environment: ["KEYCHAIN_SOCKET": fake.socketPath],
                             input: bytes("my-passcode\n"), asUser: client)
        #expect(unlock.status == 7)
        #expect(fake.bytesReceived == 0)
    }

    @Test func theGitHelperRefusesASocketServedByAnotherUser() throws {
        let fake = try Impostor(uid: impostor)
        let store = try run(Binaries.directory + "/git-credential-keychain", ["store"],
                            environment: ["KEYCHAIN_SOCKET": fake.socketPath],
                            input: bytes("protocol=https\nhost=example.com\nusername=u\npassword=hunter2\n\n"), asUser: client)
        #expect(store.status == 0)  // git's rule: a helper that cannot store says so on stderr only
        #expect(fake.bytesReceived == 0)
    }

    @Test func namingTheDaemonsUidInTheEnvironmentTrustsIt() throws {
        let fake = try Impostor(uid: impostor)
        _ = try run(Binaries.keychain, ["add", "--service", "db", "--account", "me"],
                    environment: ["KEYCHAIN_SOCKET": fake.socketPath, "KEYCHAIN_TRUST_UID": "\(impostor)"],
                    input: secret, asUser: client)
        #expect(fake.bytesReceived > 0)
    }

    @Test func namingTheDaemonsUidAsAnArgumentTrustsIt() throws {
        let fake = try Impostor(uid: impostor)
        _ = try run(Binaries.keychain, ["status", "--trust-uid", "\(impostor)"],
                    environment: ["KEYCHAIN_SOCKET": fake.socketPath], input: [], asUser: client)
        #expect(fake.bytesReceived > 0)
    }

    @Test func trustingAnotherUidDoesNotTrustThisOne() throws {
        let fake = try Impostor(uid: impostor)
        let add = try run(Binaries.keychain, ["add", "--service", "db", "--account", "me", "--trust-uid", "\(client + 1000)"],
                          environment: ["KEYCHAIN_SOCKET": fake.socketPath], input: secret, asUser: client)
        #expect(add.status == 7)
        #expect(fake.bytesReceived == 0)
    }

    @Test func aDefaultSocketDirectoryMadeByAnotherUserIsNotUsed() throws {
        let directory = "/tmp/keychaind-\(client)"
        try? FileManager.default.removeItem(atPath: directory)
        mkdir(directory, 0o777)
        chmod(directory, 0o777)
        chown(directory, impostor, impostor)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fake = try Impostor(uid: impostor, socketPath: directory + "/keychaind.sock")
        // No XDG_RUNTIME_DIR and no KEYCHAIN_SOCKET, as under cron or su.
        let add = try run(Binaries.keychain, ["add", "--service", "db", "--account", "me"],
                          environment: [:], input: secret, asUser: client)
        #expect(add.status == 7)
        #expect(add.stderr.contains("\(directory) is not a private directory owned by you"))
        #expect(fake.bytesReceived == 0)
    }

    /// The attack of issue 27: another user makes /tmp/keychaind-UID first (and listens in
    /// it). Without XDG_RUNTIME_DIR the user's keychaind still starts, in a directory of the
    /// user's home that only the user can create, and the user's clients find it there.
    @Test func aDefaultSocketDirectoryMadeByAnotherUserDoesNotKeepTheUsersKeychainFromStarting() throws {
        let directory = "/tmp/keychaind-\(client)"
        try? FileManager.default.removeItem(atPath: directory)
        mkdir(directory, 0o777)
        chmod(directory, 0o777)
        chown(directory, impostor, impostor)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fake = try Impostor(uid: impostor, socketPath: directory + "/keychaind.sock")
        var template = Array("/tmp/kchome.XXXXXX".utf8CString)
        let home = String(cString: try #require(mkdtemp(&template)))
        chown(home, client, client)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let environment = ["HOME": home, "PATH": "/usr/bin:/bin", "KEYCHAIND_INSECURE_FAST_KDF": "1"]
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        daemon.arguments = ["--reuid=\(client)", "--regid=\(client)", "--clear-groups", Binaries.keychaind]
        daemon.environment = environment
        let log = Pipe()
        daemon.standardError = log
        daemon.standardOutput = log
        try daemon.run()
        defer {
            daemon.terminate()
            daemon.waitUntilExit()
        }
        let socket = home + "/.local/state/keychaind/keychaind.sock"
        for _ in 0..<1000 where !FileManager.default.fileExists(atPath: socket) && daemon.isRunning { usleep(20_000) }
        try #require(daemon.isRunning, "keychaind did not start")
        let add = try run(Binaries.keychain, ["add", "--service", "db", "--account", "me"],
                          environment: environment, input: secret, asUser: client)
        #expect(add.status == 0, "\(add.stderr)")
        let get = try run(Binaries.keychain, ["get", "--service", "db", "--account", "me"],
                          environment: environment, input: [], asUser: client)
        #expect(get.stdout == secret)
        #expect(fake.bytesReceived == 0)
        var st = stat()
        #expect(lstat(home + "/.local/state/keychaind", &st) == 0 && st.st_uid == client && st.st_mode & 0o777 == 0o700)
    }

    @Test func theRealDaemonOfTheSameUserIsStillTrusted() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["add", "--service", "db", "--account", "me"], input: secret).status == 0)
        #expect(try d.cli(["get", "--service", "db", "--account", "me"]).stdout == secret)
    }
}
