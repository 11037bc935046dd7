import Foundation
import KeychainModel
import Testing

/// keychaind started as systemd starts it: its variables, its exit statuses, its journal.
@Suite("keychaind under systemd", .serialized)
struct SystemdTests {
    let item = ["--service", "systemd.example.com", "--account", "svc"]

    /// keychaind with exactly these arguments and variables added, stderr to `stderr` (a file).
    private func launch(_ d: RunningDaemon, _ arguments: [String], environment: [String: String] = [:],
                        executable: String = Binaries.keychaind, stderr: FileHandle? = nil) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        env["KEYCHAIND_INSECURE_FAST_KDF"] = "1"
        p.environment = env.merging(environment) { $1 }
        if !FileManager.default.fileExists(atPath: d.logPath) {
            FileManager.default.createFile(atPath: d.logPath, contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: d.logPath))
        log.seekToEndOfFile()
        p.standardError = stderr ?? log
        p.standardOutput = p.standardError
        try p.run()
        return p
    }

    private func waitForSocket(_ path: String, of p: Process) throws {
        for _ in 0..<1000 {
            if FileManager.default.fileExists(atPath: path), canConnect(path) { return }
            guard p.isRunning else { throw KeychainError(.serviceNotAvailable, "keychaind exited with \(p.terminationStatus)") }
            usleep(20_000)
        }
        throw KeychainError(.serviceNotAvailable, "no socket at \(path)")
    }

    private func stop(_ p: Process) -> Int32 {
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        return p.terminationStatus
    }

    private func canConnect(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
        }
    }

    /// Runs keychaind to its exit (it is expected to refuse to start); its status and stderr.
    private func refusedStart(_ arguments: [String], environment: [String: String] = [:]) throws -> CLIResult {
        var env = ProcessInfo.processInfo.environment
        env["KEYCHAIND_INSECURE_FAST_KDF"] = "1"
        // Bounded: a daemon that starts after all (the behaviour under test missing) is stopped
        // by timeout, whose status (124) then fails the test rather than hanging it.
        return try runExecutable("/usr/bin/timeout", ["20", Binaries.keychaind] + arguments,
                                 environment: env.merging(environment) { $1 }, input: [])
    }

    // MARK: Socket activation

    @Test func aClientConnectingBeforeTheDaemonExistsIsServed() throws {
        let d = try RunningDaemon(start: false)
        // Spawned directly, not with Process: the activator becomes the daemon in the same
        // process (exec), and Foundation then stopped reaping the CLI's processes.
        var env = ProcessInfo.processInfo.environment
        env["KEYCHAIND_INSECURE_FAST_KDF"] = "1"
        let pid = try spawn(["/usr/bin/systemd-socket-activate", "-l", d.socketPath, "-E", "KEYCHAIND_INSECURE_FAST_KDF=1",
                             Binaries.keychaind, "--state-dir", d.stateDirectory, "--config", d.configPath],
                            environment: env, output: d.logPath)
        var stopped = false
        defer { if !stopped { kill(pid, SIGKILL); var status: Int32 = 0; waitpid(pid, &status, 0) } }
        for _ in 0..<500 where !FileManager.default.fileExists(atPath: d.socketPath) { usleep(10_000) }
        #expect(!FileManager.default.fileExists(atPath: d.stateDirectory), "the daemon must not have started yet")
        // This connection is what starts the daemon.
        #expect(try d.cli(["add"] + item, input: bytes("activated")).status == Exit.success)
        #expect(try d.cli(["get"] + item).stdout == bytes("activated"))
        #expect(d.log.contains("from the service manager"))
        kill(pid, SIGTERM)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        stopped = true
        #expect(status == 0)
        var st = stat()
        #expect(lstat(d.socketPath, &st) == 0 && (st.st_mode & S_IFMT) == S_IFSOCK,
                "the socket is the service manager's: the daemon must leave it")
    }

    /// posix_spawn with stdout and stderr appended to `output`.
    private func spawn(_ argv: [String], environment: [String: String], output: String) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let cArgs = argv.map { strdup($0) } + [nil]
        let cEnv = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (cArgs + cEnv).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, nil, cArgs, cEnv)
        guard rc == 0 else { throw KeychainError(.io, "posix_spawn \(argv[0]): \(rc)") }
        return pid
    }

    // MARK: Exit status 78

    @Test func aBadConfigFileExitsWithEXConfig() throws {
        let d = try RunningDaemon(config: "no_such_key = 1", start: false)
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath])
        #expect(r.status == 78)
        #expect(r.stderr.contains("no_such_key"))
    }

    @Test func anUnreadableConfigFileExitsWithEXConfig() throws {
        let d = try RunningDaemon(start: false)
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.root + "/absent.toml"])
        #expect(r.status == 78)
        #expect(r.stderr.contains("absent.toml"))
    }

    @Test func aBadFlagExitsWithEXConfig() throws {
        let r = try refusedStart(["--no-such-flag"])
        #expect(r.status == 78)
        #expect(r.stderr.contains("no-such-flag"))
    }

    @Test func aBadEnvironmentOverrideExitsWithEXConfig() throws {
        let d = try RunningDaemon(start: false)
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath],
                                 environment: ["KEYCHAIND_LOG_LEVEL": "loud"])
        #expect(r.status == 78)
        #expect(r.stderr.contains("KEYCHAIND_LOG_LEVEL"))
    }

    @Test func otherStartFailuresExitWithOne() throws {
        let d = try RunningDaemon(start: false)
        FileManager.default.createFile(atPath: d.stateDirectory, contents: Data("not a directory".utf8))
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath])
        #expect(r.status == 1)
    }

    @Test func helpStillExitsZero() throws {
        #expect(try refusedStart(["--help"]).status == 0)
    }

    // MARK: Directories and overrides from the environment

    @Test func systemdDirectoriesPlaceStateSocketAndConfig() throws {
        let d = try RunningDaemon(start: false)
        let run = d.root + "/run", conf = d.root + "/etc", state = d.root + "/lib"
        try FileManager.default.createDirectory(atPath: run, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])  // under /tmp: must be private
        try FileManager.default.createDirectory(atPath: conf, withIntermediateDirectories: false)
        try "log_level = \"error\"\n".write(toFile: conf + "/keychaind.toml", atomically: true, encoding: .utf8)
        let p = try launch(d, [], environment: ["STATE_DIRECTORY": state + ":" + d.root + "/other",
                                                "RUNTIME_DIRECTORY": run, "CONFIGURATION_DIRECTORY": conf])
        try waitForSocket(run + "/keychaind.sock", of: p)
        #expect(FileManager.default.fileExists(atPath: state + "/keychain.db"))
        #expect(!FileManager.default.fileExists(atPath: d.root + "/other"))
        #expect(!d.log.contains("keychaind ready"), "the default config file's log_level (error) applies")
        #expect(stop(p) == 0)
    }

    @Test func theDefaultConfigFileIsReloadedOnSIGHUP() throws {
        let d = try RunningDaemon(start: false)
        let conf = d.root + "/etc"
        try FileManager.default.createDirectory(atPath: conf, withIntermediateDirectories: false)
        try "".write(toFile: conf + "/keychaind.toml", atomically: true, encoding: .utf8)
        let p = try launch(d, ["--state-dir", d.stateDirectory, "--socket", d.socketPath],
                           environment: ["CONFIGURATION_DIRECTORY": conf])
        defer { _ = stop(p) }
        try waitForSocket(d.socketPath, of: p)
        kill(p.processIdentifier, SIGHUP)
        for _ in 0..<500 where !d.log.contains("config reloaded") { usleep(10_000) }
        #expect(d.log.contains("config reloaded"))
    }

    /// Started with no config file, keychaind once ignored SIGHUP (no RELOADING=1, and a file
    /// written later was never read). Each SIGHUP is announced, and the default path is
    /// looked at again. READY=1 follows the reload, so the log already holds its outcome.
    @Test func aDefaultConfigFileWrittenAfterTheStartIsReadOnSIGHUPAndEachReloadIsAnnounced() throws {
        let d = try RunningDaemon(start: false)
        let conf = d.root + "/etc"
        try FileManager.default.createDirectory(atPath: conf, withIntermediateDirectories: false)
        let notify = d.root + "/notify"
        let listener = try DatagramListener(path: notify)
        defer { listener.close() }
        let p = try launch(d, ["--state-dir", d.stateDirectory, "--socket", d.socketPath],
                           environment: ["CONFIGURATION_DIRECTORY": conf, "NOTIFY_SOCKET": notify])
        defer { _ = stop(p) }
        #expect(listener.next()?.first == "READY=1")
        kill(p.processIdentifier, SIGHUP)
        #expect(listener.next()?.first == "RELOADING=1")
        #expect(listener.next()?.first == "READY=1")
        #expect(d.log.contains("SIGHUP: no config file at \(conf)/keychaind.toml"))
        #expect(!d.log.contains("config reloaded"))
        try "unknown_callers = \"private-group\"\n".write(toFile: conf + "/keychaind.toml", atomically: true, encoding: .utf8)
        kill(p.processIdentifier, SIGHUP)
        #expect(listener.next()?.first == "RELOADING=1")
        #expect(listener.next()?.first == "READY=1")
        #expect(d.log.contains("unknown callers: private-group"))
    }

    @Test func aConfigFileThatIsNotUTF8IsRefusedNamingTheLineAndByte() throws {
        let d = try RunningDaemon(start: false)
        let path = d.root + "/latin1.toml"
        FileManager.default.createFile(atPath: path, contents: Data(Array("log_level = \"info\"\n# caf".utf8) + [0xE9, 0x0A]))
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", path])
        #expect(r.status == 78)
        #expect(r.stderr.contains("\(path): line 2, column 6: invalid UTF-8 (byte 0xE9)"))
        #expect(!r.stderr.contains("cannot read config file"))
    }

    @Test func aDefaultConfigFileWithAnErrorIsReportedAsOne() throws {
        let d = try RunningDaemon(start: false)
        let conf = d.root + "/etc"
        try FileManager.default.createDirectory(atPath: conf, withIntermediateDirectories: false)
        try "bogus = 1\n".write(toFile: conf + "/keychaind.toml", atomically: true, encoding: .utf8)
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath],
                                 environment: ["CONFIGURATION_DIRECTORY": conf])
        #expect(r.status == 78)
        #expect(r.stderr.contains(conf + "/keychaind.toml"))
    }

    @Test func environmentVariablesOverrideTheFileAndFlagsOverrideThem() throws {
        let d = try RunningDaemon(config: "socket = \"\(DefaultSocketPlaceholder.unused)\"\nstate_dir = \"/nonexistent/state\"\nlog_level = \"debug\"", start: false)
        let envSocket = d.root + "/env.sock", envState = d.root + "/env-state"
        let p = try launch(d, ["--config", d.configPath],
                           environment: ["KEYCHAIND_SOCKET": envSocket, "KEYCHAIND_STATE_DIR": envState,
                                         "KEYCHAIND_LOG_LEVEL": "error"])
        try waitForSocket(envSocket, of: p)
        #expect(FileManager.default.fileExists(atPath: envState + "/keychain.db"))
        #expect(!d.log.contains("keychaind ready"), "KEYCHAIND_LOG_LEVEL=error, not the file's debug")
        #expect(stop(p) == 0)
        let q = try launch(d, ["--config", d.configPath, "--socket", d.socketPath],
                           environment: ["KEYCHAIND_SOCKET": envSocket, "KEYCHAIND_STATE_DIR": envState])
        try waitForSocket(d.socketPath, of: q)
        #expect(!canConnect(envSocket))
        #expect(stop(q) == 0)
    }

    // MARK: journald

    @Test func underJournaldLinesCarryTheirPriorityAndNoTimestamp() throws {
        let d = try RunningDaemon(start: false)
        let stderr = Pipe()
        var st = stat()
        fstat(stderr.fileHandleForWriting.fileDescriptor, &st)
        let p = try launch(d, ["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath],
                           environment: ["JOURNAL_STREAM": "\(st.st_dev):\(st.st_ino)"], stderr: stderr.fileHandleForWriting)
        try stderr.fileHandleForWriting.close()
        try waitForSocket(d.socketPath, of: p)
        #expect(stop(p) == 0)
        let text = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let lines = text.split(separator: "\n")
        #expect(!lines.isEmpty)
        #expect(lines.allSatisfy { $0.hasPrefix("<6>keychaind: ") || $0.hasPrefix("<7>keychaind: ") || $0.hasPrefix("<5>keychaind: ") }, "\(text)")
        #expect(lines.contains { $0.hasPrefix("<6>keychaind: ") && $0.contains("keychaind ready") })
        #expect(!text.contains(" info keychaind"), "no timestamp and level of our own")
    }

    @Test func elsewhereLinesStayAsTheyWere() throws {
        let d = try RunningDaemon()
        d.stop()
        #expect(!d.log.contains("<6>"))
        #expect(d.log.contains(" info keychaind"))
    }

    // MARK: The device key as a credential

    /// What systemd does at the service's start with LoadCredentialEncrypted=: decrypts the
    /// credential into $CREDENTIALS_DIRECTORY, read-only for the service's user.
    /// `mode` 0440 is how a credential that systemd gave another user's service through an ACL
    /// looks to stat (the ACL's mask in the group bits).
    private func sealAndPlace(_ keyFile: String, in d: RunningDaemon, mode: mode_t = 0o400) throws -> String {
        let sealed = d.root + "/device.key.cred", credentials = d.root + "/credentials"
        try FileManager.default.createDirectory(atPath: credentials, withIntermediateDirectories: false)
        let encrypt = try runExecutable("/usr/bin/systemd-creds", ["encrypt", "--with-key=host", "--name=device.key", keyFile, sealed],
                                        environment: ProcessInfo.processInfo.environment, input: [])
        try #require(encrypt.status == 0, "systemd-creds encrypt: \(encrypt.stderr)")
        let decrypt = try runExecutable("/usr/bin/systemd-creds", ["decrypt", "--name=device.key", sealed, credentials + "/device.key"],
                                        environment: ProcessInfo.processInfo.environment, input: [])
        try #require(decrypt.status == 0, "systemd-creds decrypt: \(decrypt.stderr)")
        chmod(credentials + "/device.key", mode)
        return credentials
    }

    @Test func aKeychainOpensWithItsDeviceKeyFromASealedCredential() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["add"] + item, input: bytes("sealed")).status == Exit.success)
        d.stop()
        let plain = d.stateDirectory + "/device.key", moved = d.root + "/device.key.plain"
        try FileManager.default.moveItem(atPath: plain, toPath: moved)
        let credentials = try sealAndPlace(moved, in: d)
        let p = try launch(d, ["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath],
                           environment: ["CREDENTIALS_DIRECTORY": credentials])
        try waitForSocket(d.socketPath, of: p)
        #expect(try d.cli(["get"] + item).stdout == bytes("sealed"))
        #expect(stop(p) == 0)
        #expect(!FileManager.default.fileExists(atPath: plain), "no plain key is written back")
    }

    @Test func aCredentialThatDiffersFromTheStateDirectorysKeyIsRefused() throws {
        let d = try RunningDaemon()
        d.stop()
        let other = d.root + "/other.key"
        FileManager.default.createFile(atPath: other, contents: Data((0..<32).map { UInt8($0) }), attributes: [.posixPermissions: 0o600])
        let credentials = try sealAndPlace(other, in: d)
        let r = try refusedStart(["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath],
                                 environment: ["CREDENTIALS_DIRECTORY": credentials])
        #expect(r.status == 1)
        #expect(r.stderr.contains("differs from \(d.stateDirectory)/device.key"))
    }

    @Test func aFirstStartWithACredentialMakesNoPlainKey() throws {
        let d = try RunningDaemon(start: false)
        let key = d.root + "/new.key"
        FileManager.default.createFile(atPath: key, contents: Data((0..<32).map { UInt8(255 - $0) }), attributes: [.posixPermissions: 0o600])
        let credentials = try sealAndPlace(key, in: d, mode: 0o440)
        let p = try launch(d, ["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath],
                           environment: ["CREDENTIALS_DIRECTORY": credentials])
        try waitForSocket(d.socketPath, of: p)
        #expect(try d.cli(["add"] + item, input: bytes("new")).status == Exit.success)
        #expect(stop(p) == 0)
        #expect(!FileManager.default.fileExists(atPath: d.stateDirectory + "/device.key"))
    }
}

/// A socket path in the config that the environment's must replace: nothing listens there.
enum DefaultSocketPlaceholder {
    static let unused = "/nonexistent/keychaind-config.sock"
}
