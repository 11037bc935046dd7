import Foundation
import KeychainModel
import Testing

/// `keychain run -- CMD`: a throw-away keychain for CI, whatever CMD does (docs/cli.md,
/// "keychain run").
@Suite("keychain run", .serialized)
struct KeychainRunTests {
    /// Runs `keychain run ARGS` with the build directory first on PATH.
    func keychainRun(_ arguments: [String], environment extra: [String: String] = [:]) throws -> CLIResult {
        var environment = ["PATH": Binaries.directory + ":/usr/bin:/bin", "HOME": NSTemporaryDirectory()]
        environment.merge(extra) { $1 }
        return try runExecutable(Binaries.keychain, ["run"] + arguments, environment: environment, input: [])
    }

    /// The private directory a run used, from the KEYCHAIN_SOCKET that CMD printed first.
    func directory(of result: CLIResult) throws -> String {
        let socket = try #require(result.text.split(separator: "\n").first.map(String.init))
        #expect(socket.hasSuffix("/keychaind.sock"), "\(result.text) \(result.stderr)")
        return (socket as NSString).deletingLastPathComponent
    }

    /// Nothing is left of a run: its directory is gone and no process names it.
    func expectNothingLeft(of directory: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(!FileManager.default.fileExists(atPath: directory), "\(directory) left behind", sourceLocation: sourceLocation)
        let processes = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for pid in processes where Int(pid) != nil {
            guard let line = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { continue }
            let text = String(decoding: line.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            #expect(!text.contains(directory), "pid \(pid) still runs: \(text)", sourceLocation: sourceLocation)
        }
    }

    @Test func theCommandUsesAPrivateKeychainAndItsExitStatusIsReturned() throws {
        let r = try keychainRun(["--", "/bin/sh", "-c", """
            echo "$KEYCHAIN_SOCKET"
            printf 'ci-token' | keychain add --service ci --account bot || exit 90
            keychain get --service ci --account bot; echo
            exit 3
            """])
        #expect(r.status == 3, "\(r.stderr)")
        #expect(r.text.split(separator: "\n").dropFirst().first == "ci-token", "\(r.text)")
        expectNothingLeft(of: try directory(of: r))
    }

    @Test func eachRunStartsEmpty() throws {
        let script = ["--", "/bin/sh", "-c", "echo \"$KEYCHAIN_SOCKET\"; keychain get --service ci --account bot"]
        let r = try keychainRun(script)
        #expect(r.status == 2, "not found: \(r.text) \(r.stderr)")
    }

    @Test func aCommandThatCrashesLeavesNothingBehind() throws {
        let r = try keychainRun(["--", "/bin/sh", "-c", "echo \"$KEYCHAIN_SOCKET\"; kill -SEGV $$"])
        #expect(r.status == 128 + SIGSEGV)
        expectNothingLeft(of: try directory(of: r))
    }

    @Test func aCommandThatIsKilledLeavesNothingBehind() throws {
        let r = try keychainRun(["--", "/bin/sh", "-c", "echo \"$KEYCHAIN_SOCKET\"; kill -KILL $$"])
        #expect(r.status == 128 + SIGKILL)
        expectNothingLeft(of: try directory(of: r))
    }

    /// A daemon that forks, leaves the session, keeps standard output open and outlives CMD:
    /// it is ended, and `keychain run` returns (the test's read of standard output ends).
    @Test func aDaemonTheCommandForkedIsEnded() throws {
        var template = Array("/tmp/kcrun.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let pidFile = scratch + "/daemon.pid"
        let r = try keychainRun(["--", "/bin/sh", "-c", """
            echo "$KEYCHAIN_SOCKET"
            setsid /bin/sh -c 'echo $$ > \(pidFile).new && mv \(pidFile).new \(pidFile); trap "" TERM; while :; do sleep 1; done' &
            while [ ! -s \(pidFile) ]; do sleep 0.01; done
            exit 0
            """])
        #expect(r.status == 0, "\(r.stderr)")
        let pid = try #require(Int32(try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(kill(pid, 0) != 0 && errno == ESRCH, "the daemon \(pid) still runs")
        expectNothingLeft(of: try directory(of: r))
    }

    @Test func aTerminatedRunStopsTheCommandAndCleansUp() throws {
        var template = Array("/tmp/kcrun.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Binaries.keychain)
        p.arguments = ["run", "--", "/bin/sh", "-c", "echo \"$KEYCHAIN_SOCKET\" > \(scratch)/socket; exec sleep 1000"]
        p.environment = ["PATH": Binaries.directory + ":/usr/bin:/bin"]
        try p.run()
        for _ in 0..<2000 where !FileManager.default.fileExists(atPath: scratch + "/socket") { usleep(10_000) }
        p.terminate()
        p.waitUntilExit()
        #expect(p.terminationStatus == 128 + SIGTERM, "sleep's status, passed on")
        let socket = try String(contentsOfFile: scratch + "/socket", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        expectNothingLeft(of: (socket as NSString).deletingLastPathComponent)
    }

    @Test func withSecretServiceSecretToolStoresInThePrivateKeychain() throws {
        let r = try keychainRun(["--secret-service", "--", "/bin/sh", "-c", """
            echo "$KEYCHAIN_SOCKET"
            printf 'bus-token' | secret-tool store --label CI service ci user bot || exit 91
            secret-tool lookup service ci user bot; echo
            keychain list | grep -c 'secret-service:'
            """])
        #expect(r.status == 0, "\(r.text) \(r.stderr)")
        #expect(r.text.split(separator: "\n").dropFirst().first == "bus-token", "\(r.text)")
        expectNothingLeft(of: try directory(of: r))
    }

    @Test func aCommandThatCannotBeFoundIs127() throws {
        let r = try keychainRun(["--", "no-such-command-for-keychain-run"])
        #expect(r.status == 127)
        #expect(r.stderr.contains("no-such-command-for-keychain-run"))
    }

    @Test func withoutACommandItIsAUsageError() throws {
        let r = try keychainRun([])
        #expect(r.status == 64)
        #expect(r.stderr.contains("keychain run -- CMD"))
    }
}
