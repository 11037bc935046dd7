import Foundation
import KeychainModel
import Testing

/// Lock, Unlock and the pinentry prompt (design 3.1) through the real bridge and keychaind,
/// with a stand-in pinentry (Tests/SecretServiceScripts/fake_pinentry.py) speaking Assuan.
@Suite("Secret Service: lock and unlock")
struct SecretServiceLockTests {
    /// A setup whose keychain has a passcode and one `ak` item made through the bridge, then
    /// locked; the bridge's pinentry answers `answers` in turn.
    static func lockedSetup(answers: [String], pinentry: String? = SecretServiceScripts.path("fake_pinentry.py"),
                            path: String = "/usr/bin:/bin") throws -> (SecretServiceSetup, item: String, log: String) {
        let setup = try SecretServiceSetup(startBridge: false)
        let log = setup.daemon.root + "/pinentry.log"
        _ = try setup.startedBridge(["--protection", "ak"] + (pinentry.map { ["--pinentry", $0] } ?? []),
                                    environment: ["FAKE_PINENTRY_ANSWERS": answers.joined(separator: ","),
                                                  "FAKE_PINENTRY_LOG": log, "PATH": path])
        #expect(try setup.daemon.cli(["passcode", "set"], input: bytes("1234\n")).status == 0)
        let item = try #require(try setup.pythonJSON("locking.py", ["create"])["path"] as? String)
        let locked = try setup.pythonJSON("locking.py", ["lock"])
        #expect(locked["locked"] as? [String] == ["/org/freedesktop/secrets/collection/login"])
        return (setup, item, log)
    }

    @Test func aLockedKeychainListsItemsAsLockedAndRefusesTheirSecrets() throws {
        let (setup, item, _) = try Self.lockedSetup(answers: [])
        let seen = try setup.pythonJSON("locking.py", ["observe", item])
        #expect(seen["locked"] as? Bool == true)
        #expect(seen["lockedItems"] as? [String] == [item])
        #expect(seen["lockedByPair"] as? [String] == [item], "the attribute index finds a locked item by its pairs")
        #expect(seen["unlocked"] as? [String] == [])
        #expect(seen["secret"] as? String == "org.freedesktop.Secret.Error.IsLocked")
    }

    @Test func unlockPromptsWithPinentryRetriesAWrongPasscodeAndUnlocks() throws {
        let (setup, item, log) = try Self.lockedSetup(answers: ["wrong", "1234"])
        let unlocked = try setup.pythonJSON("locking.py", ["unlock"])
        #expect(unlocked["prompted"] as? Bool == true)
        #expect(unlocked["dismissed"] as? Bool == false)
        #expect(unlocked["result"] as? [String] == ["/org/freedesktop/secrets/collection/login"])
        let seen = try setup.pythonJSON("locking.py", ["observe", item])
        #expect(seen["locked"] as? Bool == false)
        #expect(seen["secret"] as? String == "ok")
        let commands = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(commands.contains("SETTITLE keychain"))
        #expect(commands.contains("SETDESC Unlock the keychain for python3 (pid "), "\(commands)")
        #expect(commands.contains("SETERROR the passcode is not correct"), "\(commands)")
        #expect(commands.components(separatedBy: "GETPIN").count - 1 == 2)
        #expect(!commands.contains("1234") && !commands.contains("wrong"))
    }

    @Test func cancellingThePromptDismissesIt() throws {
        let (setup, item, _) = try Self.lockedSetup(answers: ["cancel"])
        let unlocked = try setup.pythonJSON("locking.py", ["unlock"])
        #expect(unlocked["dismissed"] as? Bool == true)
        #expect(unlocked["result"] as? [String] == [])
        #expect(try setup.pythonJSON("locking.py", ["observe", item])["secret"] as? String == "org.freedesktop.Secret.Error.IsLocked")
    }

    @Test func threeWrongPasscodesDismissThePrompt() throws {
        let (setup, _, log) = try Self.lockedSetup(answers: ["a", "b", "c", "1234"])
        let unlocked = try setup.pythonJSON("locking.py", ["unlock"])
        #expect(unlocked["dismissed"] as? Bool == true)
        let commands = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(commands.components(separatedBy: "GETPIN").count - 1 == 3)
    }

    @Test func withoutAPinentryUnlockSaysToRunKeychainUnlock() throws {
        let (setup, _, _) = try Self.lockedSetup(answers: [], pinentry: nil, path: "/nonexistent")
        let unlocked = try setup.pythonJSON("locking.py", ["unlock"])
        #expect(unlocked["error"] as? String == "org.freedesktop.Secret.Error.IsLocked")
        #expect((unlocked["message"] as? String)?.contains("run `keychain unlock`") == true, "\(unlocked)")
    }

    @Test func unlockingAnUnlockedKeychainNeedsNoPrompt() throws {
        let setup = try SecretServiceSetup()
        let unlocked = try setup.pythonJSON("locking.py", ["unlock"])
        #expect(unlocked["prompted"] as? Bool == false)
        #expect(unlocked["result"] as? [String] == ["/org/freedesktop/secrets/collection/login"])
    }

    @Test func withoutAPasscodeLockLocksNothing() throws {
        let setup = try SecretServiceSetup()
        let locked = try setup.pythonJSON("locking.py", ["lock"])
        #expect(locked["locked"] as? [String] == [])
        #expect(try setup.daemon.cli(["status"]).text.contains("unlocked"))
    }
}
