import Foundation
import KeychainClient
import KeychainModel
import Testing

/// `keychain init`, a user's first run in one command (issue 26).
@Suite("keychain init", .serialized)
struct InitCommandTests {
    /// A daemon that is not running yet: its paths, and a config of the test defaults.
    func place() throws -> RunningDaemon { try RunningDaemon(start: false) }

    func initialize(_ d: RunningDaemon, _ extra: [String] = [], input: String) throws -> CLIResult {
        try d.cli(["init", "--state-dir", d.stateDirectory] + extra, input: bytes(input),
                  environment: ["KEYCHAIND_CONFIG": d.configPath])
    }

    @Test func initStartsKeychaindAndMakesTheLoginPasswordUnlockIt() throws {
        let d = try place()
        defer { ServerProcess.stop(socket: d.socketPath) }
        let r = try initialize(d, input: "Login-pw-1\n")
        #expect(r.status == Exit.success, "\(r.stderr)")
        #expect(r.text.contains("keychaind: started on \(d.socketPath)"), "\(r.text)")
        #expect(r.text.contains("passcode: your login password, with a login slot"), "\(r.text)")
        let c = KeychainConnection(socketPath: d.socketPath)
        let status = try c.status()
        #expect(status["passcode"] == .bool(true))
        #expect(status["login_slot"] == .string("current"))
        try c.lock()
        try c.loginUnlock(password: bytes("Login-pw-1"))
        #expect(try c.status()["state"] == .string("unlocked"))
    }

    @Test func initAgainChangesNothingAndSaysSo() throws {
        let d = try place()
        defer { ServerProcess.stop(socket: d.socketPath) }
        #expect(try initialize(d, ["--unlock-with", "passcode"], input: "1234\n").status == Exit.success)
        let again = try initialize(d, input: "")
        #expect(again.status == Exit.success, "\(again.stderr)")
        #expect(again.text.contains("keychaind: already serving"), "\(again.text)")
        #expect(again.text.contains("passcode: already set; login slot: none"), "\(again.text)")
        try KeychainConnection(socketPath: d.socketPath).unlock(passcode: bytes("1234"))
    }

    @Test func initWithoutAPasscodeLeavesTheKeychainOpen() throws {
        let d = try place()
        defer { ServerProcess.stop(socket: d.socketPath) }
        let r = try initialize(d, ["--unlock-with", "none"], input: "")
        #expect(r.status == Exit.success, "\(r.stderr)")
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["passcode"] == .bool(false))
    }

    /// --pam changes the machine's PAM configuration: never for a user who is not root.
    @Test func initPamIsRefusedToAnOrdinaryUser() throws {
        let d = try place()
        let user = try MultiUserTests.user("kcapp-c")
        let r = try d.cli(["init", "--pam", "--unlock-with", "none"], asUser: user)
        #expect(r.status == Exit.denied, "\(r.stderr)")
        #expect(r.stderr.contains("sudo keychain init --pam"), "\(r.stderr)")
    }

    @Test func keychaindHelpPointsToInit() throws {
        let r = try runExecutable(Binaries.keychaind, ["--help"], environment: [:], input: [])
        #expect(r.text.contains("keychain init"), "\(r.text)")
    }
}
