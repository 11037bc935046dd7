#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import KeychainModel

/// `keychaind --background`: starts the daemon as a child in a session of its own and returns
/// only once it serves, so that the next command of a script (or of a block pasted from the
/// README) finds the socket listening. `keychaind &` returned before the socket existed, and
/// the next `keychain add` failed with "cannot reach keychaind".
///
/// The child learns nothing new: it is keychaind with the same arguments, less this flag, and
/// $NOTIFY_SOCKET naming a datagram socket in a directory only this uid can enter, so its
/// READY=1 (ServiceNotification, as for systemd's Type=notify) is the signal and nobody else
/// can forge it. The child's own exit before it is ready is reported with its exit status.
public enum BackgroundStart {
    /// How long the parent waits for READY=1 before it gives up waiting (the child goes on).
    public static let readinessWait: Int32 = 60_000

    /// Never returns: exits 0 with the child's pid on stdout once it is ready, else with the
    /// child's exit status (or 1) and a line on stderr. Call before any thread starts.
    public static func run(arguments: [String]) -> Never {
        let program = "/proc/self/exe"
        var template = Array("/tmp/keychaind-start.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { fail("cannot make a directory for the readiness socket", errno) }
        let directory = String(cString: made)
        let path = directory + "/notify"
        // exit() runs no defer: every way out goes through `leave`.
        func leave(_ status: Int32) -> Never {
            unlink(path)
            rmdir(directory)
            exit(status)
        }
        let listener = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { let e = errno; rmdir(directory); fail("socket", e) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let name = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { let e = errno; rmdir(directory); fail("bind \(path)", e) }

        var environment = Environment.current.filter { !$0.hasPrefix("NOTIFY_SOCKET=") }
        environment.append("NOTIFY_SOCKET=\(path)")
        let (pid, spawnError) = spawn(program, arguments: ["keychaind"] + arguments, environment: environment)
        if spawnError != 0 {
            writeLine(2, "keychaind: \(SystemCallError("cannot start \(program)", errno: spawnError))")
            leave(1)
        }

        var waited: Int32 = 0
        var buffer = [UInt8](repeating: 0, count: 4096)
        while waited < readinessWait {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid {
                let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
                writeLine(2, "keychaind: the daemon exited before it was ready (status \(code)); its reason is above")
                leave(code == 0 ? 1 : code)
            }
            var poller = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, 250)
            waited += 250
            guard ready > 0 else { continue }
            let n = recv(listener, &buffer, buffer.count, 0)
            guard n > 0 else { continue }
            let message = String(decoding: buffer[0..<n], as: UTF8.self)
            if message.split(separator: "\n").contains("READY=1") {
                writeLine(1, "\(pid)")
                leave(0)
            }
        }
        writeLine(2, "keychaind: the daemon (pid \(pid)) is not ready after \(readinessWait / 1000) s; it goes on starting")
        leave(1)
    }

    /// In a session of its own (closing the terminal sends no SIGHUP, which keychaind takes as
    /// "reload"), stdin and stdout on /dev/null, stderr kept for the log, and nothing else of
    /// the caller's open in it for its whole life (a pipe a script waits on, a terminal).
    private static func spawn(_ program: String, arguments: [String], environment: [String]) -> (pid_t, Int32) {
        var pid: Int32 = 0
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup($0) } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        let rc = csystem_spawn_detached(&pid, program, argv, envp)
        return (pid, rc)
    }

    private static func fail(_ what: String, _ code: Int32) -> Never {
        writeLine(2, "keychaind: \(SystemCallError(what, errno: code))")
        exit(1)
    }

    private static func writeLine(_ fd: Int32, _ text: String) {
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

/// The process's environment as `NAME=value` strings.
private enum Environment {
    static var current: [String] {
        var out: [String] = []
        var p = environ
        while let entry = p.pointee {
            out.append(String(cString: entry))
            p += 1
        }
        return out
    }
}
