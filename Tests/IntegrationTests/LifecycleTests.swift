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
        _ = try d.cli(["add", "--service", "s", "--account", "a"], input: bytes(secret))
        _ = try d.cli(["add", "--service", "s", "--account", "a"], input: bytes(secret))  // duplicate: an error path
        _ = try d.cli(["passcode", "set"], input: bytes(secret + "\n"))
        _ = try d.cli(["unlock"], input: bytes("wrong-" + secret + "\n"))
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
