import Foundation
import KeychainClient
import KeychainModel
import Testing

@Suite("The daemon process", .serialized)
struct LifecycleTests {
    @Test func sigtermStopsCleanlyWithExitZeroAndRemovesTheSocket() throws {
        let d = try RunningDaemon()
        #expect(d.stop(signal: SIGTERM) == 0)
        #expect(!FileManager.default.fileExists(atPath: d.socketPath))
        #expect(d.log.contains("keychaind stopped"))
    }

    @Test func sigintStopsCleanlyToo() throws {
        let d = try RunningDaemon()
        #expect(d.stop(signal: SIGINT) == 0)
    }

    /// systemd's Type=notify: the service manager hears each phase on the datagram socket
    /// named by NOTIFY_SOCKET (here one the test listens on).
    @Test func theServiceManagerIsToldReadyReloadingAndStopping() throws {
        let notify = "/tmp/kcn-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let listener = try DatagramListener(path: notify)
        defer { listener.close(); unlink(notify) }
        let d = try RunningDaemon(environment: ["NOTIFY_SOCKET": notify])
        #expect(listener.next()?.first == "READY=1")
        kill(d.pid, SIGHUP)
        #expect(listener.next()?.first == "RELOADING=1")
        #expect(listener.next()?.first == "READY=1")
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["state"] == .string("unlocked"))
        #expect(d.stop(signal: SIGTERM) == 0)
        #expect(listener.next()?.first == "STOPPING=1")
    }

    @Test func aStaleSocketFromACrashIsReplaced() throws {
        let d = try RunningDaemon()
        d.crash()
        #expect(FileManager.default.fileExists(atPath: d.socketPath))
        try d.start()
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["state"] == .string("unlocked"))
    }

    @Test func aSecondDaemonOnALiveSocketRefusesWithAClearMessage() throws {
        let d = try RunningDaemon()
        let second = Process()
        second.executableURL = URL(fileURLWithPath: Binaries.keychaind)
        second.arguments = ["--state-dir", d.root + "/other-state", "--socket", d.socketPath]
        let err = Pipe()
        second.standardError = err
        try second.run()
        let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        second.waitUntilExit()
        #expect(second.terminationStatus != 0)
        #expect(message.contains("already serving"))
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["state"] == .string("unlocked"))
    }

    @Test func processIsHardenedAgainstDumpsAndBacktraces() throws {
        let d = try RunningDaemon()
        let limits = try String(contentsOfFile: "/proc/\(d.pid)/limits", encoding: .utf8)
        let core = try #require(limits.split(separator: "\n").first { $0.hasPrefix("Max core file size") })
        #expect(core.split(separator: " ", omittingEmptySubsequences: true).dropFirst(4).first == "0")
        let environ = try Data(contentsOf: URL(fileURLWithPath: "/proc/\(d.pid)/environ"))
        #expect(environ.split(separator: 0).contains { String(decoding: $0, as: UTF8.self) == "SWIFT_BACKTRACE=enable=no" })
    }

    @Test func stateDirectoryFilesAndSocketArePrivate() throws {
        let d = try RunningDaemon()
        let fm = FileManager.default
        func mode(_ path: String) throws -> Int { (try fm.attributesOfItem(atPath: path)[.posixPermissions] as? Int) ?? -1 }
        #expect(try mode(d.stateDirectory) == 0o700)
        #expect(try mode(d.stateDirectory + "/device.key") == 0o600)
        #expect(try mode(d.stateDirectory + "/keychain.db") == 0o600)
        #expect(try mode(d.socketPath) == 0o600)
    }

    @Test func secretsNeverReachTheLog() throws {
        let d = try RunningDaemon()
        let secret = "NEVER-LOG-THIS-7f3a"
        // Each call must reach the daemon and take the path named, or an empty log would pass.
        #expect(try d.cli(["add", "--service", "s", "--account", "a"], input: bytes(secret)).status == Exit.success)
        #expect(try d.cli(["add", "--service", "s", "--account", "a"], input: bytes(secret)).status == Exit.duplicate)
        #expect(try d.cli(["passcode", "set"], input: bytes(secret + "\n")).status == Exit.success)
        #expect(try d.cli(["unlock"], input: bytes("wrong-" + secret + "\n")).status == Exit.authFailed)
        d.stop()
        #expect(!d.log.contains(secret))
        #expect(!d.log.isEmpty)
    }

    @Test func aBadConfigFileStopsTheDaemonNamingTheLine() throws {
        let d = try RunningDaemon(config: "no_such_key = 1", start: false)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Binaries.keychaind)
        p.arguments = ["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath]
        let err = Pipe()
        p.standardError = err
        try p.run()
        let message = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        #expect(p.terminationStatus != 0)
        #expect(message.contains("line 5"))  // after the harness's four default lines
        #expect(message.contains("no_such_key"))
    }
}

/// A datagram socket bound at a path, as a service manager's notification socket is.
struct DatagramListener {
    let fd: Int32

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { throw KeychainError(.io, "bind \(path): \(errno)") }
    }

    /// The next datagram's lines, waiting for it up to 10 s (nil: none came).
    func next() -> [Substring]? {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, 10_000) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return n < 0 ? nil : String(decoding: buffer.prefix(n), as: UTF8.self).split(separator: "\n")
    }

    func close() { Glibc.close(fd) }
}
