import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Items that ask first through the Secret Service bridge (issues 28 and 29): with
/// `--require presence`, items created through the bridge carry userPresence; they are locked to
/// the Secret Service, and Unlock's prompt has keychaind ask the person with its own pinentry
/// (a scripted one here, Tests/SecretServiceScripts/fake_pinentry.py), naming the D-Bus caller.
@Suite("Secret Service: items that ask first")
struct SecretServiceAsksFirstTests {
    static let passcode = "1234"

    /// keychaind with a passcode and a [prompt] whose pinentry answers `answers`, and a bridge
    /// started with `bridgeArguments`.
    static func setup(answers: [String], bridgeArguments: [String] = ["--require", "presence"]) throws -> (SecretServiceSetup, log: String) {
        let pinentry = try ScriptedPinentry(answers: answers)
        let setup = try SecretServiceSetup(config: pinentry.promptSection, startBridge: false)
        setup.cleanUp.append(pinentry.directory)
        _ = try setup.startedBridge(bridgeArguments)
        #expect(try setup.daemon.cli(["passcode", "set"], input: bytes(passcode + "\n")).status == 0)
        return (setup, pinentry.log)
    }

    static func said(_ log: String) -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    @Test func anItemCreatedWithRequireCarriesUserPresenceAndIsLockedToTheSecretService() throws {
        let (setup, log) = try Self.setup(answers: [])
        let item = try #require(try setup.pythonJSON("asks_first.py", ["create"])["path"] as? String)
        let stored = try KeychainConnection(socketPath: setup.daemon.socketPath).copyMatching(
            ["class": .string("genp"), "svce": .string("secret-service:login"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let attributes)) = stored else { Issue.record("\(stored)"); return }
        #expect(attributes["accc"] == .string("ck;1"))
        let seen = try setup.pythonJSON("asks_first.py", ["observe", item])
        #expect(seen["locked"] as? [String] == [item])
        #expect(seen["unlocked"] as? [String] == [])
        #expect(seen["itemLocked"] as? Bool == true)
        #expect(seen["getSecret"] as? String == "org.freedesktop.Secret.Error.IsLocked")
        #expect(seen["getSecrets"] as? Int == 0)
        #expect(!Self.said(log).contains("GETPIN"), "nothing asks without Unlock")
    }

    @Test func unlockAsksThroughKeychaindsPromptNamingTheCallerAndAllowsOneRead() throws {
        let (setup, log) = try Self.setup(answers: [Self.passcode])
        let item = try #require(try setup.pythonJSON("asks_first.py", ["create"])["path"] as? String)
        let read = try setup.pythonJSON("asks_first.py", ["unlock-read", item])
        #expect(read["unlocked"] as? [String] == [])
        #expect(read["prompted"] as? Bool == true)
        #expect(read["dismissed"] as? Bool == false)
        #expect(read["result"] as? [String] == [item])
        #expect(read["secret"] as? String == "asked for")
        #expect(read["again"] as? String == "org.freedesktop.Secret.Error.IsLocked", "one yes, one read")
        let said = Self.said(log)
        // The D-Bus caller as the kernel names its executable (python3 resolved), never the bridge.
        let python = try FileManager.default.destinationOfSymbolicLink(atPath: "/usr/bin/python3")
        #expect(said.contains("SETDESC /usr/bin/\(python) (pid "), "\(said)")
        #expect(said.contains("\u{201C}asks first\u{201D}"), "\(said)")
        #expect(!said.contains("keychain-secret-service"), "\(said)")
        #expect(!said.contains(Self.passcode))
    }

    @Test func cancellingKeychaindsPromptDismissesTheUnlockAndTheItemStaysLocked() throws {
        let (setup, _) = try Self.setup(answers: ["cancel"])
        let item = try #require(try setup.pythonJSON("asks_first.py", ["create"])["path"] as? String)
        let read = try setup.pythonJSON("asks_first.py", ["unlock-read", item])
        #expect(read["dismissed"] as? Bool == true)
        #expect(read["result"] as? [String] == [])
        #expect(read["secret"] as? String == "org.freedesktop.Secret.Error.IsLocked")
    }

    /// libsecret's lookup finds the item locked, unlocks it (the prompt) and reads it.
    @Test func secretToolLookupAsksNamingSecretToolAndPrintsTheSecret() throws {
        let (setup, log) = try Self.setup(answers: [Self.passcode])
        _ = try #require(try setup.pythonJSON("asks_first.py", ["create"])["path"] as? String)
        let found = try runExecutable("/usr/bin/secret-tool", ["lookup", "asks", "first"], environment: setup.environment, input: [])
        #expect(found.status == 0 && found.text.trimmingCharacters(in: .newlines) == "asked for", "\(found.stderr)")
        #expect(Self.said(log).contains("SETDESC /usr/bin/secret-tool (pid "), "\(Self.said(log))")
    }

    /// With keychaind locked, one Unlock does both: the bridge's dialog unlocks keychaind, then
    /// keychaind's own prompt asks for the item that asks first (it took a second Unlock).
    @Test func oneUnlockOfALockedKeychainAlsoAsksForTheItemThatAsksFirst() throws {
        let pinentry = try ScriptedPinentry(answers: [Self.passcode])
        let setup = try SecretServiceSetup(config: pinentry.promptSection, startBridge: false)
        setup.cleanUp.append(pinentry.directory)
        _ = try setup.startedBridge(["--require", "presence", "--pinentry", SecretServiceScripts.path("fake_pinentry.py")],
                                    environment: ["FAKE_PINENTRY_ANSWERS": Self.passcode, "FAKE_PINENTRY_LOG": setup.daemon.root + "/bridge-pinentry.log",
                                                  "PATH": "/usr/bin:/bin"])
        #expect(try setup.daemon.cli(["passcode", "set"], input: bytes(Self.passcode + "\n")).status == 0)
        let item = try #require(try setup.pythonJSON("asks_first.py", ["create"])["path"] as? String)
        #expect(try setup.daemon.cli(["lock"]).status == 0)
        let read = try setup.pythonJSON("asks_first.py", ["unlock-read", item])
        #expect(read["prompted"] as? Bool == true)
        #expect(read["dismissed"] as? Bool == false)
        #expect(read["result"] as? [String] == [item])
        #expect(read["secret"] as? String == "asked for")
        #expect(Self.said(pinentry.log).contains("\u{201C}asks first\u{201D}"), "\(Self.said(pinentry.log))")
    }

    /// An item that asks first made by another keychain client (not through the bridge): before
    /// op 48 left such items out, GetSecrets gave its secret to any caller without asking.
    @Test func getSecretsNeverHandsOutAnItemThatAsksFirstWithoutAsking() throws {
        let (setup, log) = try Self.setup(answers: [], bridgeArguments: [])
        try KeychainConnection(socketPath: setup.daemon.socketPath).add([
            "class": .string("genp"), "svce": .string("secret-service:login"), "labl": .string("made elsewhere"),
            "xsat": .data(try SecretServiceAttributes(["asks": "first"]).encoded), "accc": .string("ak;1"),
            "v_Data": .data(Array("asked for".utf8)),
        ])
        let search = try setup.pythonJSON("asks_first.py", ["search"])
        let item = try #require((search["locked"] as? [String])?.first)
        let seen = try setup.pythonJSON("asks_first.py", ["observe", item])
        #expect(seen["getSecrets"] as? Int == 0)
        #expect(seen["getSecret"] as? String == "org.freedesktop.Secret.Error.IsLocked")
        #expect(!Self.said(log).contains("GETPIN"))
    }
}
