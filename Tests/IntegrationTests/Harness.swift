import Foundation
import KeychainModel
import Testing

/// Where the built executables are: beside the test bundle in the build directory.
enum Binaries {
    static let directory: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (exe as NSString).deletingLastPathComponent
    }()
    static var keychaind: String { directory + "/keychaind" }
    static var keychain: String { directory + "/keychain" }
}

/// A real keychaind on a temporary state directory and socket, stopped (and its files removed)
/// when the value goes away. Short timeouts so stuck-client tests run fast.
final class RunningDaemon: @unchecked Sendable {
    let root: String
    let socketPath: String
    let stateDirectory: String
    let logPath: String
    let configPath: String
    private(set) var process: Process?

    /// `config` lines are appended to the test defaults (Config/keychaind.toml documents keys).
    /// Whether the daemon runs with KEYCHAIND_INSECURE_FAST_KDF=1 (tests that need the
    /// configured Argon2id cost turn it off).
    let fastKDF: Bool
    /// Added to the daemon's environment (e.g. LD_PRELOAD for the freed-memory scan).
    let environment: [String: String]
    /// A program and its arguments that run keychaind (e.g. setpriv dropping a capability).
    let launcher: [String]

    init(config: String = "", start: Bool = true, fastKDF: Bool = true, environment: [String: String] = [:],
         launcher: [String] = []) throws {
        _ = brokenPipesAreErrors
        self.fastKDF = fastKDF
        self.environment = environment
        self.launcher = launcher
        // Unix socket paths are limited to 108 bytes: keep the directory short.
        var template = Array("/tmp/kci.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        root = String(cString: p)
        chmod(root, 0o755)  // other test users must reach the socket inside
        socketPath = root + "/s.sock"
        stateDirectory = root + "/state"
        logPath = root + "/daemon.log"
        configPath = root + "/keychaind.toml"
        // Test defaults, unless `config` sets the key itself: short time-outs, no grace period.
        let defaults = ["idle_timeout_seconds = 2", "frame_timeout_seconds = 1", "log_level = \"debug\"",
                        "lock_grace_seconds = 0"]
        let given = Set(config.split(separator: "\n").compactMap { $0.split(separator: "=").first.map { $0.trimmingCharacters(in: .whitespaces) } })
        let text = (defaults.filter { !given.contains(String($0.split(separator: "=")[0]).trimmingCharacters(in: .whitespaces)) }
                    + [config]).joined(separator: "\n") + "\n"
        try text.write(toFile: configPath, atomically: true, encoding: .utf8)
        if start { try self.start() }
    }

    deinit {
        if let process, process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Starts the daemon and waits until its socket accepts.
    func start() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: launcher.first ?? Binaries.keychaind)
        p.arguments = (launcher.isEmpty ? [] : launcher.dropFirst() + [Binaries.keychaind])
            + ["--state-dir", stateDirectory, "--socket", socketPath, "--config", configPath]
        var env = ProcessInfo.processInfo.environment
        env["KEYCHAIND_INSECURE_FAST_KDF"] = fastKDF ? "1" : nil
        env.merge(environment) { $1 }
        p.environment = env
        if !FileManager.default.fileExists(atPath: logPath) {
            FileManager.default.createFile(atPath: logPath, contents: nil)
        }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        log.seekToEndOfFile()
        p.standardError = log
        p.standardOutput = log
        try p.run()
        process = p
        try waitUntilReady()
    }

    func waitUntilReady(timeout: Double = 20) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if canConnect() { return }
            if let process, !process.isRunning {
                throw KeychainError(.serviceNotAvailable, "keychaind exited with \(process.terminationStatus): \(log)")
            }
            usleep(20_000)
        }
        throw KeychainError(.serviceNotAvailable, "keychaind did not become ready: \(log)")
    }

    func canConnect() -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            let b = Array(socketPath.utf8)
            buf.copyBytes(from: b)
            buf[b.count] = 0
        }
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }

    /// SIGTERM (or another signal), then waits; returns the exit status.
    @discardableResult
    func stop(signal: Int32 = SIGTERM) -> Int32 {
        guard let process else { return -1 }
        kill(process.processIdentifier, signal)
        process.waitUntilExit()
        self.process = nil
        return process.terminationStatus
    }

    /// kill -9: no chance to clean up.
    func crash() {
        guard let process else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        self.process = nil
    }

    func restart() throws {
        stop()
        try start()
    }

    var pid: Int32 { process?.processIdentifier ?? -1 }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
}

/// The result of running the `keychain` executable.
struct CLIResult {
    let status: Int32
    let stdout: [UInt8]
    let stderr: String
    var text: String { String(decoding: stdout, as: UTF8.self) }
}

extension RunningDaemon {
    /// Runs `keychain` against this daemon with `input` on standard input (a pipe, so never a
    /// terminal). `asUser` runs it under another uid through setpriv.
    /// `executable` and `environment` let a test run a twin of the CLI with a hook loaded.
    func cli(_ arguments: [String], input: [UInt8] = [], asUser uid: UInt32? = nil,
             executable: String = Binaries.keychain, environment: [String: String] = [:]) throws -> CLIResult {
        var env = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        env["KEYCHAIN_SOCKET"] = socketPath
        return try runExecutable(executable, arguments, environment: env, input: input, asUser: uid)
    }
}

/// Runs `executable` with exactly `environment` and `input` on standard input (a pipe, so never
/// a terminal); `asUser` runs it under another uid through setpriv.
func runExecutable(_ executable: String, _ arguments: [String], environment: [String: String],
                   input: [UInt8], asUser uid: UInt32? = nil) throws -> CLIResult {
    let p = Process()
    if let uid {
        p.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        p.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", executable] + arguments
    } else {
        p.executableURL = URL(fileURLWithPath: executable)
        p.arguments = arguments
    }
    p.environment = environment
    let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
    p.standardInput = stdin
    p.standardOutput = stdout
    p.standardError = stderr
    _ = brokenPipesAreErrors
    try p.run()
    // A program may exit without reading its input (a refusal, a usage error): the write then
    // fails with EPIPE, which must not kill the test runner with SIGPIPE.
    try? stdin.fileHandleForWriting.write(contentsOf: Data(input))
    try stdin.fileHandleForWriting.close()
    let out = stdout.fileHandleForReading.readDataToEndOfFile()
    let err = stderr.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return CLIResult(status: p.terminationStatus, stdout: Array(out), stderr: String(decoding: err, as: UTF8.self))
}

/// Runs `keychain` on a pseudo-terminal (util-linux `script`), typing `lines` one by one
/// (CLITests, NewcomerTests).
func onTerminal(_ d: RunningDaemon, _ arguments: String, typing lines: [String]) throws -> CLIResult {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/usr/bin/script")
    p.arguments = ["-qec", "\(Binaries.keychain) \(arguments)", "/dev/null"]
    p.environment = ["KEYCHAIN_SOCKET": d.socketPath, "PATH": "/usr/bin:/bin"]
    let stdin = Pipe(), stdout = Pipe()
    p.standardInput = stdin
    p.standardOutput = stdout
    p.standardError = stdout
    try p.run()
    for line in lines {
        usleep(300_000)  // let the prompt turn echo off first
        try? stdin.fileHandleForWriting.write(contentsOf: Data((line + "\r").utf8))
    }
    usleep(300_000)
    try stdin.fileHandleForWriting.close()
    let out = stdout.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return CLIResult(status: p.terminationStatus, stdout: Array(out), stderr: "")
}

func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// SIGPIPE ignored in the test runner, once: a write to a pipe or socket whose reader has gone
/// (a child that exited early, an agent that closed the connection) is then an EPIPE error for
/// the test to see, not the end of every test in the run.
let brokenPipesAreErrors: Void = { signal(SIGPIPE, SIG_IGN) }()

/// Expects `body` to throw a KeychainError with `status`.
func expectStatus(_ status: KeychainStatus, sourceLocation: SourceLocation = #_sourceLocation,
                  _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected \(status), but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.status == status, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
}

/// A value shared between threads under a lock.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}
