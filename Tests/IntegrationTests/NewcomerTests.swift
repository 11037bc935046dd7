import DBus
import Foundation
import KeychainModel
import Testing

/// What a new user meets first, following README.md, docs/cli.md and the man pages (issue 25):
/// each step works as written, and each error says what to do next.
@Suite("A newcomer's first hour", .serialized)
struct NewcomerTests {
    let item = ["--service", "api.example.com", "--account", "alice"]

    /// Runs `keychain` on a pseudo-terminal (util-linux `script`), typing `lines` one by one.
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

    /// A daemon with a passcode, locked, its grace period `grace` seconds.
    func lockedDaemon(grace: Int = 0) throws -> RunningDaemon {
        let d = try RunningDaemon(config: "lock_grace_seconds = \(grace)")
        #expect(try d.cli(["passcode", "set"], input: bytes("1234\n")).status == Exit.success)
        #expect(try d.cli(["lock"]).status == Exit.success)
        return d
    }

    // MARK: --trust-uid takes a user name, before or after the command

    @Test func trustUIDTakesAUserName() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        let r = try runExecutable(Binaries.keychain, ["status", "--trust-uid", "kcimpostor"],
                                  environment: ["KEYCHAIN_SOCKET": fake.socketPath, "PATH": "/usr/bin:/bin"], input: [])
        #expect(!r.stderr.contains("refusing to talk"), "\(r.stderr)")
        #expect(fake.bytesReceived > 0)
    }

    @Test func trustUIDIsAcceptedBeforeTheCommand() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        let r = try runExecutable(Binaries.keychain, ["--trust-uid", "\(impostor)", "status"],
                                  environment: ["KEYCHAIN_SOCKET": fake.socketPath, "PATH": "/usr/bin:/bin"], input: [])
        #expect(r.status != Exit.usage, "\(r.stderr)")
        #expect(fake.bytesReceived > 0)
    }

    @Test func keychainTrustUIDTakesAUserName() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        _ = try runExecutable(Binaries.keychain, ["status"],
                              environment: ["KEYCHAIN_SOCKET": fake.socketPath, "KEYCHAIN_TRUST_UID": "kcimpostor", "PATH": "/usr/bin:/bin"],
                              input: [])
        #expect(fake.bytesReceived > 0)
    }

    @Test func theBridgeTakesAUserNameForTrustUID() throws {
        let impostor = try MultiUserTests.user("kcimpostor")
        let fake = try ServerTrustTests.Impostor(uid: impostor)
        let r = try runExecutable(Binaries.directory + "/keychain-secret-service", ["--trust-uid", "kcimpostor", "--socket", fake.socketPath],
                                  environment: ["PATH": "/usr/bin:/bin", "SWIFT_BACKTRACE": "enable=no"], input: [])
        #expect(r.status == 1)  // the impostor hangs up: no keychaind there
        #expect(!r.stderr.contains("not a numeric uid") && !r.stderr.contains("refusing to talk"), "\(r.stderr)")
        #expect(fake.bytesReceived > 0)
    }

    @Test func aTrustUIDThatNamesNobodyIsAUsageError() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["status", "--trust-uid", "no-such-user-kc25"])
        #expect(r.status == Exit.usage)
        #expect(r.stderr.contains("neither a numeric uid nor a user"))
    }
}
