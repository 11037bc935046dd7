import Foundation
import KeychainClient
import KeychainModel
import Testing

/// A real PAM stack without touching the machine's /etc/pam.d: pam_wrapper with a private
/// service directory, pamtester, real accounts and pam_unix (which passes the typed password on
/// to later modules, as pam_matrix does not), and pam_keychaind.so as `make pam` builds it.
struct PAMStack {
    static let security = "/usr/lib/x86_64-linux-gnu/security"
    static let wrapper = "/usr/lib/x86_64-linux-gnu/libpam_wrapper.so"
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The module, built by the Makefile's own rule (make test builds it first; this keeps a
    /// filtered `swift test` honest too).
    static let module: String = {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/make")
        p.arguments = ["-s", "-C", root, "pam"]
        try? p.run()
        p.waitUntilExit()
        return root + "/.build/pam/pam_keychaind.so"
    }()

    let directory: String

    /// `lines` of the service `name`; `MODULE` stands for pam_keychaind.so and `SECURITY/` for
    /// the system's module directory.
    init(_ name: String, _ lines: String) throws {
        #expect(FileManager.default.fileExists(atPath: Self.module), "make pam did not build \(Self.module)")
        var template = Array("/tmp/kcpam.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        directory = String(cString: p)
        let text = lines.replacingOccurrences(of: "MODULE", with: Self.module)
            .replacingOccurrences(of: "SECURITY/", with: Self.security + "/")
        try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8)
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }

    /// pamtester as root (as login and sshd run PAM), typing `input`; its exit status and output.
    func run(_ service: String, user: String, _ operations: [String], input: String,
             environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        try wrapped("/usr/bin/pamtester", ["-v", service, user] + operations, input: input, environment: environment)
    }

    /// Debian's own `passwd USER` as root, under the private stack named `passwd`. Only root's:
    /// run by the user, passwd is set-uid, and the loader then ignores LD_PRELOAD (secure
    /// execution), so pam_wrapper cannot give it a private stack.
    func passwd(_ user: String, input: String) throws -> (status: Int32, output: String) {
        try wrapped("/usr/bin/passwd", [user], input: input)
    }

    private func wrapped(_ executable: String, _ arguments: [String], input: String,
                         environment: [String: String] = [:]) throws -> (status: Int32, output: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
        p.environment = ["LD_PRELOAD": Self.wrapper, "PAM_WRAPPER": "1", "PAM_WRAPPER_SERVICE_DIR": directory,
                         "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"].merging(environment) { $1 }
        let stdin = Pipe(), out = Pipe()
        p.standardInput = stdin
        p.standardOutput = out
        p.standardError = out
        _ = brokenPipesAreErrors
        try p.run()
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8))
        try stdin.fileHandleForWriting.close()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        return (p.terminationStatus, text)
    }
}

/// A real account with a password, removed with the value.
final class TestAccount {
    let name: String
    let uid: UInt32

    init(_ name: String, password: String) throws {
        _ = Self.run("/usr/sbin/userdel", [name])
        guard Self.run("/usr/sbin/useradd", ["--no-create-home", "--shell", "/bin/sh", name]) == 0,
              let pw = getpwnam(name) else { throw KeychainError(.io, "useradd \(name) failed") }
        self.name = name
        uid = pw.pointee.pw_uid
        try setPassword(password)
    }

    deinit { _ = Self.run("/usr/sbin/userdel", [name]) }

    func setPassword(_ password: String) throws {
        guard Self.run("/usr/sbin/chpasswd", [], input: "\(name):\(password)\n") == 0 else {
            throw KeychainError(.io, "chpasswd \(name) failed")
        }
    }

    @discardableResult
    static func run(_ path: String, _ arguments: [String], input: String = "") -> Int32 {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: path)
        p.arguments = arguments
        let stdin = Pipe()
        p.standardInput = stdin
        p.standardError = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        guard (try? p.run()) != nil else { return -1 }
        try? stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8))
        try? stdin.fileHandleForWriting.close()
        p.waitUntilExit()
        return p.terminationStatus
    }
}

@Suite("pam_keychaind in a real PAM stack", .serialized)
struct PAMModuleTests {
    let password = "Login-pw-1"
    let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("pam"), "acct": .string("a"), "pdmn": .string("ak")]

    /// Auth and session as Debian's common-auth lays them out: pam_unix must succeed (the
    /// stack stops at pam_deny otherwise) before the Additional modules run.
    func loginStack(_ socket: String, options: String = "") -> String {
        """
        auth [success=1 default=ignore] SECURITY/pam_unix.so
        auth requisite SECURITY/pam_deny.so
        auth required SECURITY/pam_permit.so
        auth optional MODULE socket=\(socket) \(options)
        account required SECURITY/pam_permit.so
        session optional MODULE socket=\(socket) \(options)
        password required SECURITY/pam_unix.so
        password optional MODULE socket=\(socket) \(options)
        """
    }

    /// The user's keychain (here served by a daemon run as root that makes the user an admin,
    /// as the user's own keychaind is for its user), locked, with a login slot for `password`.
    func lockedKeychain(for account: TestAccount, password: String? = nil) throws -> (RunningDaemon, KeychainConnection) {
        let password = password ?? self.password
        let d = try RunningDaemon(config: "socket_mode = \"0666\"\nadmin_uids = [0, \(account.uid)]")
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item.merging(["v_Data": .data(bytes("s"))]) { $1 })
        try c.setPasscode(bytes("passcode"))
        try c.addLoginSlot(password: bytes(password))
        try d.restart()
        return (d, c)
    }

    @Test func aLoginUnlocksTheKeychain() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        let stack = try PAMStack("kc-login", loginStack(d.socketPath))
        defer { stack.remove() }
        let r = try stack.run("kc-login", user: account.name, ["authenticate", "open_session"], input: password + "\n")
        #expect(r.status == 0, "\(r.output)")
        #expect(try c.status()["state"] == .string("unlocked"))
        #expect(d.log.contains("unlocked through the login slot by"))
    }

    @Test func aWrongPasswordLeavesItLockedAndNoCounterMoves() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        defer { withExtendedLifetime(d) {} }
        let stack = try PAMStack("kc-login", loginStack(c.socketPath))
        defer { stack.remove() }
        let r = try stack.run("kc-login", user: account.name, ["authenticate", "open_session"], input: "wrong\n")
        #expect(r.status != 0, "\(r.output)")
        let status = try c.status()
        #expect(status["state"] == .string("lockedSinceBoot"))
        #expect(status["failed_attempts"] == .int(0))
        #expect(try c.loginSlotStatus()["failed_attempts"] == .int(0))
    }

    /// keychaind not running at auth (as before the user's first login): the password is kept
    /// for the session stage, which starts it (here pam_exec stands in for socket activation).
    @Test func theSessionStageUnlocksAKeychaindStartedAfterAuth() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        d.stop()
        let start = d.root + "/start"
        try """
            #!/bin/sh
            KEYCHAIND_INSECURE_FAST_KDF=1 exec \(Binaries.keychaind) --background --state-dir \(d.stateDirectory) --socket \(d.socketPath) --config \(d.configPath)
            """.write(toFile: start, atomically: true, encoding: .utf8)
        chmod(start, 0o755)
        let stack = try PAMStack("kc-login", loginStack(d.socketPath).replacingOccurrences(
            of: "session optional MODULE", with: "session optional SECURITY/pam_exec.so \(start)\nsession optional MODULE"))
        defer { stack.remove() }
        let r = try stack.run("kc-login", user: account.name, ["authenticate", "open_session"], input: password + "\n",
                              environment: ["KEYCHAIND_INSECURE_FAST_KDF": "1"])
        defer { ServerProcess.stop(socket: d.socketPath) }
        #expect(r.status == 0, "\(r.output)")
        #expect(try c.status()["state"] == .string("unlocked"))
    }

    /// A screen locker authenticates without a session stage: auth alone unlocks.
    @Test func aScreenLockersAuthAloneUnlocks() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        let stack = try PAMStack("kc-locker", """
            auth [success=1 default=ignore] SECURITY/pam_unix.so
            auth requisite SECURITY/pam_deny.so
            auth required SECURITY/pam_permit.so
            auth optional MODULE socket=\(d.socketPath)
            """)
        defer { stack.remove() }
        let r = try stack.run("kc-locker", user: account.name, ["authenticate"], input: password + "\n")
        #expect(r.status == 0, "\(r.output)")
        #expect(try c.status()["state"] == .string("unlocked"))
    }

    /// The user changes the password in a session: pam_unix checked the old one (pam_set_items
    /// gives it here, as pam_unix's prompt would for the user's own `passwd`), the module
    /// rewraps the slot, and the next login with the new password unlocks.
    @Test func aPasswordChangeRewrapsTheSlotAndTheNextLoginUnlocks() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        let new = "Login-pw-2"
        let stack = try PAMStack("kc-login", loginStack(d.socketPath).replacingOccurrences(
            of: "password required SECURITY/pam_unix.so",
            with: "password optional /usr/lib/x86_64-linux-gnu/pam_wrapper/pam_set_items.so\npassword required SECURITY/pam_unix.so"))
        defer { stack.remove() }
        let change = try stack.run("kc-login", user: account.name, ["chauthtok"], input: "\(new)\n\(new)\n",
                                   environment: ["PAM_OLDAUTHTOK": password])
        #expect(change.status == 0, "\(change.output)")
        #expect(try c.loginSlotStatus()["login_slot"] == .string("current"))
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))  // a rewrap unlocks nothing
        let login = try stack.run("kc-login", user: account.name, ["authenticate", "open_session"], input: new + "\n")
        #expect(login.status == 0, "\(login.output)")
        #expect(try c.status()["state"] == .string("unlocked"))
    }

    /// Root's `passwd USER` knows no old password: the password changes, the slot goes stale,
    /// and the next login says so on the terminal and leaves the keychain locked.
    @Test func aResetByRootMakesTheSlotStaleAndTheNextLoginSaysSo() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        let stack = try PAMStack("kc-login", loginStack(d.socketPath))
        defer { stack.remove() }
        let reset = try stack.run("kc-login", user: account.name, ["chauthtok"], input: "Reset-pw-3\nReset-pw-3\n")
        #expect(reset.status == 0, "\(reset.output)")
        #expect(try c.loginSlotStatus()["login_slot"] == .string("stale"))
        let login = try stack.run("kc-login", user: account.name, ["authenticate", "open_session"], input: "Reset-pw-3\n")
        #expect(login.status == 0, "\(login.output)")
        #expect(login.output.contains("login slot is stale"), "\(login.output)")
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
        #expect(try c.loginSlotStatus()["failed_attempts"] == .int(0))
    }

    /// The real `passwd`, run by root for the user (the reset: no old password), through a
    /// private `passwd` stack: the password changes and the slot goes stale.
    @Test func rootsRealPasswdMakesTheSlotStale() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let (d, c) = try lockedKeychain(for: account)
        let stack = try PAMStack("passwd", """
            auth required SECURITY/pam_permit.so
            account required SECURITY/pam_permit.so
            password required SECURITY/pam_unix.so
            password optional MODULE socket=\(d.socketPath)
            """)
        defer { stack.remove() }
        let reset = try stack.passwd(account.name, input: "Reset-pw-4\nReset-pw-4\n")
        #expect(reset.status == 0, "\(reset.output)")
        #expect(try c.loginSlotStatus()["login_slot"] == .string("stale"))
        let login = try PAMStack("kc-login", loginStack(d.socketPath))
        defer { login.remove() }
        #expect(try login.run("kc-login", user: account.name, ["authenticate"], input: "Reset-pw-4\n").status == 0)
    }

    /// A keychaind that accepts and never answers: the login still completes (the module gives
    /// up at its bound and kills its child), and succeeds.
    @Test func aHungDaemonDoesNotHoldUpTheLogin() throws {
        let account = try TestAccount("kcpam-a", password: password)
        let hung = try HungServer()
        defer { hung.close() }
        let stack = try PAMStack("kc-login", loginStack(hung.path, options: "timeout=500"))
        defer { stack.remove() }
        let r = try stack.run("kc-login", user: account.name, ["authenticate", "open_session"], input: password + "\n")
        #expect(r.status == 0, "\(r.output)")
        #expect(hung.accepted() >= 1)
    }

    /// Another user's login, even with the same password and a stack pointed at this user's
    /// socket, is refused by keychaind before any check: nothing unlocks, no counter moves.
    @Test func anotherUidsLoginNeverTouchesThisKeychain() throws {
        let owner = try TestAccount("kcpam-a", password: password)
        let other = try TestAccount("kcpam-b", password: password)
        let (d, c) = try lockedKeychain(for: owner)
        let stack = try PAMStack("kc-login", loginStack(d.socketPath))
        defer { stack.remove() }
        let r = try stack.run("kc-login", user: other.name, ["authenticate", "open_session"], input: password + "\n")
        #expect(r.status == 0, "\(r.output)")
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
        #expect(try c.loginSlotStatus()["failed_attempts"] == .int(0))
        #expect(!d.log.contains("unlocked through the login slot"))
    }
}

/// A Unix socket, bound by root (so a client trusts it), that accepts and never answers.
final class HungServer: @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let count = Locked(0)
    private let directory: String

    init() throws {
        var template = Array("/tmp/kchung.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        directory = String(cString: p)
        chmod(directory, 0o755)
        path = directory + "/s.sock"
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            let b = Array(path.utf8)
            buf.copyBytes(from: b)
            buf[b.count] = 0
        }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else { throw KeychainError(.io, "bind \(path)") }
        chmod(path, 0o666)
        let listener = fd, count = self.count
        Thread.detachNewThread {
            var held: [Int32] = []
            while true {
                let c = accept(listener, nil, nil)
                if c < 0 { break }
                held.append(c)  // kept open, never answered
                count.withLock { $0 += 1 }
            }
            held.forEach { Glibc.close($0) }
        }
    }

    func accepted() -> Int { count.withLock { $0 } }

    func close() {
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// The keychaind serving a socket, found by its credentials, for daemons a test did not start
/// itself (pam_exec started it).
enum ServerProcess {
    static func stop(socket path: String) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            let b = Array(path.utf8)
            buf.copyBytes(from: b)
            buf[b.count] = 0
        }
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard connected == 0 else { return }
        // struct ucred (pid, uid, gid), which Glibc's module map leaves out.
        var cred: (pid: Int32, uid: UInt32, gid: UInt32) = (0, 0, 0)
        var size = socklen_t(12)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) == 0, cred.pid > 1 else { return }
        kill(cred.pid, SIGTERM)
        for _ in 0..<200 where kill(cred.pid, 0) == 0 { usleep(20_000) }
    }
}

/// End to end: a password login over ssh to a private sshd with `UsePAM yes`, under a PAM
/// service name of its own (sshd takes its program name: a link named sshd-kc) whose stack
/// pam_wrapper reads from a private directory. Keyboard-interactive is off: it runs PAM's auth in
/// a forked child, whose PAM data would never reach the session.
@Suite("pam_keychaind behind a real sshd", .serialized)
struct SSHDPAMLoginTests {
    @Test func aPasswordLoginOverSSHUnlocksTheKeychain() throws {
        let password = "Ssh-pw-123"
        let account = try TestAccount("kcpam-s", password: password)
        let (d, c) = try PAMModuleTests().lockedKeychain(for: account, password: password)
        let dir = d.root + "/sshd"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: dir + "/sshd-kc", withDestinationPath: "/usr/sbin/sshd")
        _ = try runExecutable("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", dir + "/host_key"], environment: [:], input: [])
        let stack = try PAMStack("sshd-kc", PAMModuleTests().loginStack(d.socketPath))
        defer { stack.remove() }
        let port = SSHDLoginTests.unusedPort()
        try """
            ListenAddress 127.0.0.1
            Port \(port)
            HostKey \(dir)/host_key
            PidFile \(dir)/sshd.pid
            PasswordAuthentication yes
            KbdInteractiveAuthentication no
            PubkeyAuthentication no
            UsePAM yes
            StrictModes no
            AllowUsers \(account.name)

            """.write(toFile: dir + "/sshd_config", atomically: true, encoding: .utf8)
        let log = dir + "/sshd.log"
        // posix_spawn, not Process: sshd closes every inherited descriptor (SSHDLoginTests).
        let arguments = [dir + "/sshd-kc", "-D", "-e", "-E", log, "-f", dir + "/sshd_config"]
        let environment = ["LD_PRELOAD=\(PAMStack.wrapper)", "PAM_WRAPPER=1", "PAM_WRAPPER_SERVICE_DIR=\(stack.directory)"]
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var sshd: pid_t = 0
        guard posix_spawn(&sshd, arguments[0], nil, nil, argv, envp) == 0 else { throw KeychainError(.io, "cannot start sshd") }
        defer {
            kill(sshd, SIGTERM)
            var status: Int32 = 0
            waitpid(sshd, &status, 0)
        }
        for _ in 0..<3000 {
            if ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("Server listening on 127.0.0.1 port \(port).") { break }
            usleep(10_000)
        }
        let login = try runExecutable("/usr/bin/sshpass", ["-p", password, "ssh", "-F", "/dev/null", "-o", "StrictHostKeyChecking=no",
                                                           "-o", "UserKnownHostsFile=/dev/null", "-o", "PreferredAuthentications=password",
                                                           "-o", "PubkeyAuthentication=no", "-p", String(port),
                                                           "\(account.name)@127.0.0.1", "echo in-as-$(id -un)"],
                                      environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(login.text.contains("in-as-\(account.name)"), "\(login.stderr) \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        #expect(try c.status()["state"] == .string("unlocked"))
    }
}
