import Foundation
import KeychainModel
import Testing

/// `keychaind --background` (README, "Using it"): returns once the socket serves, so the next
/// command of a script or a pasted block finds it; `keychaind &` returned before the socket
/// existed and the README's next line failed with "cannot reach keychaind".
@Suite("keychaind --background")
struct BackgroundStartTests {
    /// Runs `keychaind --background ARGS` in a fresh directory: its exit status, its stdout and
    /// the directory. The daemon's log (stderr, inherited by the daemon) goes to a file, not a
    /// pipe this test would wait on until the daemon ends.
    static func start(_ arguments: (String) -> [String]) throws -> (status: Int32, stdout: String, root: String) {
        var template = Array("/tmp/kcbg.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        let root = String(cString: p)
        // Its output to files, and waited for with waitpid: Foundation's Process did not see
        // this child exit once the daemon it started had left (a zombie, and a test waiting
        // for ever), whatever the pipes.
        let script = "exec \"$0\" --background \"$@\" >\"$KCBG_ROOT/out\" 2>\"$KCBG_ROOT/log\" </dev/null"
        var environment = ProcessInfo.processInfo.environment
        environment["KEYCHAIND_INSECURE_FAST_KDF"] = "1"
        environment["KCBG_ROOT"] = root
        let argv = ["/bin/sh", "-c", script, Binaries.keychaind] + arguments(root)
        let cArguments = argv.map { strdup($0) } + [nil]
        let cEnvironment = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (cArguments + cEnvironment).forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/bin/sh", nil, nil, cArguments, cEnvironment)
        guard rc == 0 else { throw KeychainError(.io, "posix_spawn: \(rc)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        let out = (try? String(contentsOfFile: root + "/out", encoding: .utf8)) ?? ""
        return (code, out.trimmingCharacters(in: .whitespacesAndNewlines), root)
    }

    static func stop(_ pid: Int32, _ root: String) {
        if pid > 0 { kill(pid, SIGTERM) }
        for _ in 0..<200 {
            if kill(pid, 0) != 0 { break }
            usleep(50_000)
        }
        try? FileManager.default.removeItem(atPath: root)
    }

    @Test func itReturnsOnceTheSocketServesAndPrintsTheDaemonsPid() throws {
        let (status, stdout, root) = try Self.start { ["--state-dir", $0 + "/state", "--socket", $0 + "/s.sock"] }
        let pid = Int32(stdout) ?? 0
        defer { Self.stop(pid, root) }
        #expect(status == 0)
        #expect(pid > 0, "stdout: \(stdout)")
        // At once, with no retry: the socket already serves.
        let answer = try runExecutable(Binaries.keychain, ["status"], environment: ["KEYCHAIN_SOCKET": root + "/s.sock"], input: [])
        #expect(answer.status == 0, "status right after --background returned: \(answer.stderr)")
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        #expect(exe.hasSuffix("/keychaind"))
    }

    /// Its own session: closing the terminal it was started from sends it no SIGHUP (which
    /// keychaind takes as "reload the config").
    @Test func theDaemonRunsInASessionOfItsOwn() throws {
        let (status, stdout, root) = try Self.start { ["--state-dir", $0 + "/state", "--socket", $0 + "/s.sock"] }
        let pid = Int32(stdout) ?? 0
        defer { Self.stop(pid, root) }
        #expect(status == 0)
        #expect(getsid(pid) == pid)
    }

    @Test func aDaemonThatCannotStartGivesItsExitStatusAndItsReason() throws {
        let (status, stdout, root) = try Self.start { ["--state-dir", $0 + "/state", "--socket", $0 + "/s.sock", "--config", $0 + "/missing.toml"] }
        defer { Self.stop(0, root) }
        #expect(status == 78, "EX_CONFIG, as keychaind in the foreground")
        #expect(stdout.isEmpty)
        let log = (try? String(contentsOfFile: root + "/log", encoding: .utf8)) ?? ""
        #expect(log.contains("missing.toml"), "the daemon's own reason reaches the caller's stderr: \(log)")
        #expect(log.contains("exited before it was ready"))
    }

    @Test func aSecondDaemonOnABusySocketIsRefusedAndTheFirstGoesOn() throws {
        let (status, stdout, root) = try Self.start { ["--state-dir", $0 + "/state", "--socket", $0 + "/s.sock"] }
        let pid = Int32(stdout) ?? 0
        defer { Self.stop(pid, root) }
        #expect(status == 0)
        let (second, secondOut, secondRoot) = try Self.start { _ in ["--state-dir", root + "/other", "--socket", root + "/s.sock"] }
        defer { Self.stop(0, secondRoot) }
        #expect(second != 0 && secondOut.isEmpty)
        #expect(kill(pid, 0) == 0)
    }
}
