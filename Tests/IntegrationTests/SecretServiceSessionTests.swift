import Foundation
import KeychainModel
import Testing

/// The bridge's bus side (design slice 1): owning org.freedesktop.secrets, and transfer
/// sessions as libsecret and secretstorage open them, against a real dbus-daemon, keychaind
/// and keychain-secret-service.
@Suite("Secret Service: name and sessions")
struct SecretServiceSessionTests {
    @Test func secretstorageOpensADHAndAPlainSession() throws {
        let setup = try SecretServiceSetup()
        let opened = try setup.pythonJSON("sessions.py", ["open"])
        let dh = try #require(opened["dh"] as? String)
        let plain = try #require(opened["plain"] as? String)
        #expect(dh.hasPrefix("/org/freedesktop/secrets/session/") && plain.hasPrefix("/org/freedesktop/secrets/session/"))
        #expect(dh != plain)
    }

    @Test func sessionEdgeCasesGetTheSecretServiceErrors() throws {
        let setup = try SecretServiceSetup()
        let results = try setup.pythonJSON("sessions.py", ["edge"]) as? [String: String]
        #expect(results == [
            "unknown algorithm": "org.freedesktop.DBus.Error.NotSupported",
            "empty public value": "org.freedesktop.DBus.Error.InvalidArgs",
            "public value 1": "org.freedesktop.DBus.Error.InvalidArgs",
            "public value p-1": "org.freedesktop.DBus.Error.InvalidArgs",
            "129-byte public value": "org.freedesktop.DBus.Error.InvalidArgs",
            "string for DH": "org.freedesktop.DBus.Error.InvalidArgs",
            "1-byte public value": "ok",
            "close by another connection": "org.freedesktop.Secret.Error.NoSession",
            "close by its own": "ok",
            "close twice": "org.freedesktop.Secret.Error.NoSession",
            "seventeenth session": "org.freedesktop.DBus.Error.LimitsExceeded",
            "wrong arguments": "org.freedesktop.DBus.Error.InvalidArgs",
            "no arguments": "org.freedesktop.DBus.Error.InvalidArgs",
            "secret of the wrong shape": "org.freedesktop.DBus.Error.InvalidArgs",
            "unknown member": "org.freedesktop.DBus.Error.UnknownMethod",
        ])
        #expect(setup.bridge.isRunning)
    }

    @Test func secretsThatDoNotDecryptAreInvalidArgsAndForeignSessionsNoSession() throws {
        let setup = try SecretServiceSetup()
        let results = try setup.pythonJSON("sessions.py", ["transfer"]) as? [String: String]
        #expect(results == [
            "well sealed": "ok",
            "15-byte IV": "org.freedesktop.DBus.Error.InvalidArgs",
            "empty value": "org.freedesktop.DBus.Error.InvalidArgs",
            "not whole blocks": "org.freedesktop.DBus.Error.InvalidArgs",
            "bad padding": "org.freedesktop.DBus.Error.InvalidArgs",
            "another connection's session": "org.freedesktop.Secret.Error.NoSession",
            "no such session": "org.freedesktop.Secret.Error.NoSession",
        ])
    }

    @Test func aConnectionsSessionsCloseWhenItLeavesTheBus() throws {
        let setup = try SecretServiceSetup()
        _ = try setup.pythonJSON("sessions.py", ["leave"])
        try waitUntil(timeout: 10, "the bridge to close the sessions") {
            setup.bridge.log.contains("left the bus: closed its 2 session(s)")
        }
    }

    @Test func aTakenNameIsReportedWithItsOwnerAndExitStatus2() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        let owner = try NameOwner(setup, allowReplacement: false)
        let bridge = try setup.startedBridge(waitForName: false)
        #expect(try bridge.exitStatus() == 2)
        #expect(bridge.log.contains("org.freedesktop.secrets is owned by \(owner.uniqueName) (pid \(owner.pid)"), "\(bridge.log)")
        #expect(bridge.log.contains("stop it or run with --replace"))
    }

    @Test func replaceDoesNotTakeTheNameFromAnOwnerThatRefuses() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        let owner = try NameOwner(setup, allowReplacement: false)
        let bridge = try setup.startedBridge(["--replace"], waitForName: false)
        #expect(try bridge.exitStatus() == 2)
        #expect(bridge.log.contains("owned by \(owner.uniqueName) (pid \(owner.pid)"))
        #expect(bridge.log.contains("does not allow replacement"))
    }

    @Test func replaceTakesTheNameOverAndTheOldOwnerLosesIt() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        let owner = try NameOwner(setup, allowReplacement: true)
        let bridge = try setup.startedBridge(["--replace"])
        #expect(bridge.isRunning)
        #expect(owner.nextLine() == "lost")
    }

    @Test func aBridgeThatLosesTheNameExitsWith0() throws {
        let setup = try SecretServiceSetup()
        let first = setup.bridge
        let second = try setup.startedBridge(["--replace"])
        #expect(try first.exitStatus() == 0)
        #expect(second.isRunning)
    }
}

/// Tests/SecretServiceScripts/name_owner.py: another program owning org.freedesktop.secrets.
final class NameOwner {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private(set) var uniqueName = ""
    private(set) var pid: Int32 = 0

    init(_ setup: SecretServiceSetup, allowReplacement: Bool) throws {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [SecretServiceScripts.path("name_owner.py")] + (allowReplacement ? ["allow"] : [])
        process.environment = setup.environment
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let words = (nextLine() ?? "").split(separator: " ")
        guard words.count == 3, words[0] == "ready" else { throw KeychainError(.io, "name_owner.py did not get the name") }
        uniqueName = String(words[1])
        pid = Int32(words[2]) ?? 0
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    func nextLine() -> String? {
        var line: [UInt8] = []
        while true {
            let byte = output.fileHandleForReading.readData(ofLength: 1)
            guard let b = byte.first else { return line.isEmpty ? nil : String(decoding: line, as: UTF8.self) }
            if b == 10 { return String(decoding: line, as: UTF8.self) }
            line.append(b)
        }
    }
}

/// Who may call the bridge (design 2.2, bridge side).
@Suite("Secret Service: callers")
struct SecretServiceCallerTests {
    @Test func aCallerOfAnotherUidIsRefusedWithAccessDenied() throws {
        let setup = try SecretServiceSetup()
        // The test bus admits every uid; a session bus would refuse the connection itself.
        let result = try runExecutable("/usr/bin/python3", [SecretServiceScripts.path("sessions.py"), "try"],
                                       environment: setup.environment, input: [], asUser: 65534)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.text.contains("\"open\": \"org.freedesktop.DBus.Error.AccessDenied\""), "\(result.text)")
    }

    @Test func aConnectionWhoseProcessHasExitedIsRefused() throws {
        let setup = try SecretServiceSetup()
        let result = try setup.python("sessions.py", ["orphan"])
        // The parent exits at once (a zombie until reaped, which counts as exited); the
        // child's answer comes on the same output, which stays open until it is done.
        let answer = try #require(try? JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: String], "\(result.text) \(result.stderr)")
        #expect(answer["open"] == "org.freedesktop.DBus.Error.AccessDenied")
        #expect(answer["message"]?.contains("has exited") == true, "\(answer)")
    }

    /// A connection the bridge knows (it holds its process's /proc directory), whose opener
    /// then exits and stays unreaped while a child keeps the connection: the zombie shows no
    /// executable through that directory, and counts as exited.
    @Test func aKnownConnectionWhoseOpenerIsAnUnreapedZombieIsRefused() throws {
        let setup = try SecretServiceSetup()
        let result = try setup.python("sessions.py", ["zombie"])
        let answer = try #require(try? JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: String], "\(result.text) \(result.stderr)")
        #expect(answer["before"] == "ok", "\(answer)")
        #expect(answer["open"] == "org.freedesktop.DBus.Error.AccessDenied", "\(answer)")
        #expect(answer["message"]?.contains("has exited") == true, "\(answer)")
    }
}
