import Foundation
import KeychainClient
import KeychainModel
import KeychainStorage
import Testing

/// The real daemon refuses state files it cannot trust, and says why, rather than serve them.
@Suite("keychaind and its state files", .serialized)
struct StateFilesTests {
    /// A real other user (useradd; the tests run as root, as CI does).
    static func otherUser() throws -> (uid: UInt32, name: String) {
        (try MultiUserTests.user("kcstate-other"), "kcstate-other")
    }

    /// Runs keychaind on `d`'s files and waits for it to exit, as it must when it refuses to
    /// start (one still running after 10 s is killed: status -1); returns its exit status and
    /// what it logged.
    func refusedStart(_ d: RunningDaemon) throws -> (status: Int32, message: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Binaries.keychaind)
        p.arguments = ["--state-dir", d.stateDirectory, "--socket", d.socketPath, "--config", d.configPath]
        p.environment = ProcessInfo.processInfo.environment.merging(["KEYCHAIND_INSECURE_FAST_KDF": "1"]) { $1 }
        let logPath = d.root + "/refused.log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        p.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(10)
        while p.isRunning && Date() < deadline { usleep(20_000) }
        var status: Int32 = -1
        if p.isRunning {
            p.terminate()
            p.waitUntilExit()
        } else {
            status = p.terminationStatus
        }
        return (status, (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "")
    }

    @Test(.enabled(if: getuid() == 0))
    func aStateDirectoryMadeByAnotherUserStopsTheDaemon() throws {
        let other = try Self.otherUser()
        let d = try RunningDaemon(start: false)
        #expect(mkdir(d.stateDirectory, 0o700) == 0)
        #expect(chown(d.stateDirectory, other.uid, UInt32.max) == 0)
        let (status, message) = try refusedStart(d)
        #expect(status > 0, "keychaind did not refuse: \(status)")
        #expect(message.contains(d.stateDirectory) && message.contains(other.name), "\(message)")
        #expect(!FileManager.default.fileExists(atPath: d.stateDirectory + "/device.key"))
    }

    @Test func aDatabaseWhoseKeybagWentMissingStopsTheDaemon() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["add", "--service", "s", "--account", "a"], input: bytes("old secret")).status == Exit.success)
        #expect(d.stop() == 0)
        do {
            let db = try SQLiteDatabase(path: d.stateDirectory + "/keychain.db")
            try db.execute("DELETE FROM keybag")
        }
        let (status, message) = try refusedStart(d)
        #expect(status > 0, "keychaind did not refuse: \(status)")
        #expect(message.contains("keybag") && message.contains(d.stateDirectory + "/keychain.db"), "\(message)")
    }

    @Test func anOlderCopyOfTheDatabaseAfterACleanStopStopsTheDaemon() throws {
        let d = try RunningDaemon()
        let db = URL(fileURLWithPath: d.stateDirectory + "/keychain.db")
        #expect(try d.cli(["add", "--service", "s", "--account", "first"], input: bytes("1")).status == Exit.success)
        #expect(d.stop() == 0)
        let older = try Data(contentsOf: db)
        try d.start()
        #expect(try d.cli(["add", "--service", "s", "--account", "second"], input: bytes("2")).status == Exit.success)
        #expect(try d.cli(["delete", "--service", "s", "--account", "first"]).status == Exit.success)
        #expect(d.stop() == 0)
        try older.write(to: db)
        let (status, message) = try refusedStart(d)
        #expect(status > 0, "keychaind did not refuse: \(status)")
        #expect(message.contains("lost") && message.contains("committed transaction"), "\(message)")
        #expect(message.contains(d.stateDirectory + "/keychain.generation"), "\(message)")
    }
}
