#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import KeychainModel

/// `keychain run [--secret-service] -- CMD ARGS...`: a throw-away keychain for a test run
/// (docs/cli.md, "keychain run"). A private keychaind on a private temporary directory, and with
/// --secret-service a private session bus where the bridge is started on demand; CMD gets
/// KEYCHAIN_SOCKET (and DBUS_SESSION_BUS_ADDRESS), and its exit status is returned. Whatever CMD
/// does (exits, crashes, is killed, leaves a daemon behind), everything started for it is
/// stopped and the directory removed.
enum KeychainRun {
    static let usageText = """
        Usage: keychain run [--secret-service] [--] CMD [ARGS...]

        Run CMD against a private, empty keychain made for it and removed after it: a keychaind
        on a new temporary directory (KEYCHAIN_SOCKET is set for CMD), and with --secret-service
        also a private session bus whose Secret Service is keychain-secret-service
        (DBUS_SESSION_BUS_ADDRESS is set for CMD). Exits with CMD's status (128+N when a signal N
        ended it); processes CMD leaves behind are ended. For test suites and CI.
        """

    static func main(_ argv: [String]) -> Int32 {
        var rest = argv[...]
        var secretService = false
        while let first = rest.first, first.hasPrefix("-") {
            rest = rest.dropFirst()
            switch first {
            case "--": break
            case "--secret-service": secretService = true; continue
            case "--help", "-h":
                Output.line(usageText)
                return ExitStatus.success
            default:
                return KeychainCommand.usage("unknown option \(first) for run (the command to run comes after --)", spec: nil)
            }
            break
        }
        guard !rest.isEmpty else { return KeychainCommand.usage("`keychain run` needs a command to run: keychain run -- CMD ARGS...", spec: nil) }
        do throws(KeychainError) {
            let run = try PrivateKeychain(secretService: secretService)
            defer { run.remove() }
            return run.execute(Array(rest))
        } catch {
            Output.error("keychain run: \(error.message)")
            return ExitStatus.daemonUnreachable
        }
    }
}

/// The processes and directory of one `keychain run`. Made a child subreaper first, so that
/// whatever CMD leaves behind (a daemon that forked and called setsid) becomes our child, to be
/// ended when CMD has exited.
final class PrivateKeychain {
    let directory: String
    let socketPath: String
    private var keychaind: pid_t = 0
    private var bus: pid_t = 0
    private var busAddress: String?

    init(secretService: Bool) throws(KeychainError) {
        _ = csystem_become_subreaper()
        ForwardedSignals.unblock()
        let base = RunDirectory.base
        var template = Array("\(base)/keychain-run.XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            throw SystemCallError.current("mkdtemp").keychainError("cannot make a private directory in \(base)")
        }
        directory = String(cString: template)
        socketPath = directory + "/keychaind.sock"
        do throws(KeychainError) {
            try start(secretService: secretService)
        } catch {
            remove()
            throw error
        }
    }

    private func start(secretService: Bool) throws(KeychainError) {
        let keychaindPath = try Self.sibling("keychaind")
        // An empty config: not the user's own (its [sync], its audit log) for a throw-away keychain.
        try write("", to: directory + "/keychaind.toml")
        keychaind = try Self.spawn(keychaindPath, ["--state-dir", directory + "/state", "--socket", socketPath,
                                                   "--config", directory + "/keychaind.toml"],
                                   environment: Self.environment(removing: ["KEYCHAIND_SOCKET", "KEYCHAIND_STATE_DIR", "KEYCHAIND_CONFIG",
                                                                           "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET"]),
                                   log: directory + "/keychaind.log")
        try waitForSocket(socketPath, of: keychaind, named: "keychaind", log: directory + "/keychaind.log")
        guard secretService else { return }
        let bridge = try Self.sibling("keychain-secret-service")
        let busDaemon = try Self.onPath("dbus-daemon")
        let busSocket = directory + "/bus"
        try Self.mkdir(directory + "/services")
        // The bus starts the bridge on the first call for org.freedesktop.secrets (as the user's
        // session bus does after `keychain-secret-service --enable`), with this keychain's socket.
        try write("""
            [D-BUS Service]
            Name=org.freedesktop.secrets
            Exec=\(bridge) --socket \(socketPath) --no-portal

            """, to: directory + "/services/org.freedesktop.secrets.service")
        try write("""
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(busSocket)</listen>
              <servicedir>\(directory)/services</servicedir>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>

            """, to: directory + "/bus.conf")
        bus = try Self.spawn(busDaemon, ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile"],
                             environment: Self.environment(removing: ["DBUS_SESSION_BUS_ADDRESS"]), log: directory + "/bus.log")
        try waitForSocket(busSocket, of: bus, named: "dbus-daemon", log: directory + "/bus.log")
        busAddress = "unix:path=\(busSocket)"
    }

    /// Runs CMD with the keychain's variables and waits for it; its exit status, or 128+N.
    func execute(_ command: [String]) -> Int32 {
        var variables = ["KEYCHAIN_SOCKET": socketPath]
        if let busAddress { variables["DBUS_SESSION_BUS_ADDRESS"] = busAddress }
        let path = command[0].contains("/") ? command[0] : ((try? Self.onPath(command[0])) ?? command[0])
        let child: pid_t
        // A SIGTERM that comes while CMD is being started waits, blocked, until CMD's pid is
        // known, and then goes on to it rather than ending this process without its clean-up.
        ForwardedSignals.block()
        do throws(KeychainError) {
            child = try Self.spawn(path, Array(command.dropFirst()), argv0: command[0],
                                   environment: Self.environment(removing: Array(variables.keys) + ["KEYCHAIN_TRUST_UID"]) + variables.map { "\($0.key)=\($0.value)" },
                                   log: nil)
        } catch {
            ForwardedSignals.unblock()
            Output.error("keychain run: cannot run \(command[0]): \(error.message)")
            return 127
        }
        ForwardedSignals.install(to: child)
        ForwardedSignals.unblock()
        let status = Self.wait(child)
        ForwardedSignals.install(to: 0)
        return status
    }

    /// Ends what CMD left behind, then the bus (and the bridge it started), then keychaind,
    /// and removes the directory.
    func remove() {
        endLeftovers(keeping: [keychaind, bus])
        for pid in [bus, keychaind] where pid > 0 {
            kill(pid, SIGTERM)
            _ = Self.wait(pid)
            endLeftovers(keeping: [keychaind, bus].filter { $0 != pid })
        }
        bus = 0
        keychaind = 0
        RunDirectory.remove(directory)
    }

    /// Our children other than `keeping`: asked to stop, then killed if they have not within
    /// a moment; their own children, orphaned, come to us and are ended in the next rounds.
    private func endLeftovers(keeping: [pid_t]) {
        for round in 0..<100 {
            let left = Self.children().filter { !keeping.contains($0) }
            if left.isEmpty { return }
            for pid in left { kill(pid, round < 25 ? SIGTERM : SIGKILL) }
            usleep(20_000)
            for pid in left {
                var status: Int32 = 0
                _ = waitpid(pid, &status, WNOHANG)
            }
        }
    }

    /// Our children now, from /proc/self/task/*/children.
    static func children() -> [pid_t] {
        guard let tasks = opendir("/proc/self/task") else { return [] }
        defer { closedir(tasks) }
        var pids: [pid_t] = []
        while let entry = readdir(tasks) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            guard Int(name) != nil, let text = RunDirectory.read("/proc/self/task/\(name)/children") else { continue }
            pids += text.split(separator: " ").compactMap { pid_t($0.trimmingCharacters()) }
        }
        return pids
    }

    private func waitForSocket(_ path: String, of pid: pid_t, named name: String, log: String) throws(KeychainError) {
        for _ in 0..<3000 {
            if Self.accepts(path) { return }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                if pid == keychaind { keychaind = 0 } else { bus = 0 }
                throw KeychainError(.serviceNotAvailable, "\(name) did not start: \(RunDirectory.read(log) ?? "")")
            }
            usleep(10_000)
        }
        throw KeychainError(.serviceNotAvailable, "\(name) did not listen on \(path) within 30 s: \(RunDirectory.read(log) ?? "")")
    }

    static func accepts(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
        }
    }

    /// waitpid until `pid` ends: its exit status, or 128 + the signal that ended it.
    static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { return ExitStatus.otherError }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// posix_spawn of `path` with `arguments`; standard output and error to `log` (when given),
    /// standard input from /dev/null then.
    static func spawn(_ path: String, _ arguments: [String], argv0: String? = nil, environment: [String],
                      log: String?) throws(KeychainError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let log {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
        }
        let argv: [UnsafeMutablePointer<CChar>?] = ([argv0 ?? path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        // Every child starts with no signal blocked and the forwarded ones at their defaults,
        // whatever this process inherited or set (SIGINT and SIGQUIT are ignored here while CMD
        // runs; a caller may have started us with signals blocked).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for s in ForwardedSignals.all { sigaddset(&defaults, s) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, path, &actions, &attributes, argv, envp)
        guard rc == 0 else { throw KeychainError(.io, "cannot start \(path): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// This process's environment without `names`, as NAME=VALUE strings.
    static func environment(removing names: [String]) -> [String] {
        var result: [String] = []
        var p = environ
        while let entry = p.pointee {
            let text = String(cString: entry)
            let name = text.split(separator: "=", maxSplits: 1).first.map(String.init) ?? text
            if !names.contains(name) { result.append(text) }
            p += 1
        }
        return result
    }

    /// A program installed beside this one (the build directory, or the same bin directory).
    static func sibling(_ name: String) throws(KeychainError) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        if n > 0 {
            let own = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if let slash = own.lastIndex(of: "/") {
                let candidate = String(own[..<slash]) + "/" + name
                if access(candidate, X_OK) == 0 { return candidate }
            }
        }
        return try onPath(name)
    }

    static func onPath(_ name: String) throws(KeychainError) -> String {
        let path = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") where access("\(directory)/\(name)", X_OK) == 0 {
            return "\(directory)/\(name)"
        }
        throw KeychainError(.serviceNotAvailable, "\(name) is not installed (not beside keychain, nor on PATH)")
    }

    static func mkdir(_ path: String) throws(KeychainError) {
        guard Glibc.mkdir(path, 0o700) == 0 else { throw SystemCallError.current("mkdir").keychainError("cannot create \(path)") }
    }

    private func write(_ text: String, to path: String) throws(KeychainError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw SystemCallError.current("open").keychainError("cannot create \(path)") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        guard bytes.isEmpty || bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw SystemCallError.current("write").keychainError("cannot write \(path)")
        }
    }
}


/// SIGTERM and SIGHUP sent to `keychain run` go on to CMD (which then decides), and SIGINT
/// and SIGQUIT, which a terminal sends to CMD too, are ignored meanwhile: `keychain run` stays
/// to clean up after it.
enum ForwardedSignals {
    nonisolated(unsafe) static var child: pid_t = 0
    static let all = [SIGTERM, SIGHUP, SIGINT, SIGQUIT]
    static let forwarded = [SIGTERM, SIGHUP]

    static func block() { mask(SIG_BLOCK) }

    /// Also run once at start: a caller may have started us with these signals blocked, and
    /// then a SIGTERM would never reach us (nor CMD).
    static func unblock() { mask(SIG_UNBLOCK) }

    private static func mask(_ how: Int32) {
        var set = sigset_t()
        sigemptyset(&set)
        for s in forwarded { sigaddset(&set, s) }
        pthread_sigmask(how, &set, nil)
    }

    static func install(to pid: pid_t) {
        child = pid
        guard pid > 0 else {
            for s in [SIGTERM, SIGHUP, SIGINT, SIGQUIT] { signal(s, SIG_DFL) }
            return
        }
        for s in [SIGTERM, SIGHUP] {
            signal(s) { received in
                if ForwardedSignals.child > 0 { kill(ForwardedSignals.child, received) }
            }
        }
        signal(SIGINT, SIG_IGN)
        signal(SIGQUIT, SIG_IGN)
    }
}

/// The private directory of a run: where it goes, and its removal.
enum RunDirectory {
    /// $TMPDIR, else /tmp (mkdtemp makes the directory 0700, under a name no one can know in
    /// advance).
    static var base: String {
        guard let v = getenv("TMPDIR"), v.pointee == CChar(UInt8(ascii: "/")) else { return "/tmp" }
        return String(cString: v)
    }

    /// Removes the tree without following links.
    static func remove(_ path: String) {
        removeEntries(of: path)
        rmdir(path)
    }

    private static func removeEntries(of path: String) {
        guard let directory = opendir(path) else { return }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(directory)
        for name in names {
            let child = path + "/" + name
            var st = stat()
            guard lstat(child, &st) == 0 else { continue }
            if (st.st_mode & S_IFMT) == S_IFDIR {
                remove(child)
            } else {
                unlink(child)
            }
        }
    }

    /// A small text file, or nil.
    static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 1 << 16 {
            let n = Glibc.read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes += buffer[0..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

private extension Substring {
    func trimmingCharacters() -> Substring {
        var s = self
        while let last = s.last, last == "\n" || last == " " { s.removeLast() }
        return s
    }
}
