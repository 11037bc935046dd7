import Foundation
import KeychainClient
import Testing

/// `keychain add --require`, `get --no-prompt` and what `list` shows of an item that asks
/// first (issue 29), against the real daemon with a scripted pinentry.
@Suite("CLI: --require and --no-prompt")
struct CLIRequireTests {
    @Test func listShowsThatTheTokenAsksFirstAndAsksNobody() throws {
        let prompt = try ScriptedPrompt(answers: [])
        let d = prompt.daemon
        #expect(try d.cli(["add", "--require", "passcode", "--service", "prod", "--account", "deploy"], input: bytes("t")).status == 0)
        let listed = try d.cli(["list", "--service", "prod"])
        #expect(String(decoding: listed.stdout, as: UTF8.self).contains("when-unlocked (asks first: passcode)"), "\(listed)")
        #expect(prompt.prompts == 0)
    }

    @Test func noPromptFailsWithoutAskingAndSaysWhy() throws {
        let prompt = try ScriptedPrompt(answers: [ScriptedPrompt.passcode])
        let d = prompt.daemon
        #expect(try d.cli(["add", "--require", "presence", "--service", "prod", "--account", "deploy"], input: bytes("t")).status == 0)
        let refused = try d.cli(["get", "--service", "prod", "--account", "deploy", "--no-prompt"])
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("--no-prompt forbids asking"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("keychain unlock"), "not the lock-state hint: \(refused.stderr)")
        #expect(prompt.prompts == 0)
    }

    @Test func nobodyToAskSaysSoRatherThanLocked() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["passcode", "set"], input: bytes(ScriptedPrompt.passcode + "\n")).status == 0)
        #expect(try d.cli(["add", "--require", "presence", "--service", "prod", "--account", "deploy"], input: bytes("t")).status == 0)
        let refused = try d.cli(["get", "--service", "prod", "--account", "deploy"])
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("nobody can be asked") && refused.stderr.contains("[prompt]"), "\(refused.stderr)")
    }

    @Test func requireWithoutAPasscodeOrWithSyncIsRefusedBeforeTheSecretIsRead() throws {
        let d = try RunningDaemon()
        let noPasscode = try d.cli(["add", "--require", "presence", "--service", "prod", "--account", "deploy"], input: bytes("t"))
        #expect(noPasscode.status == 64)
        #expect(noPasscode.stderr.contains("keychain passcode set"), "\(noPasscode.stderr)")
        let synced = try d.cli(["add", "--require", "presence", "--synchronizable", "--service", "prod", "--account", "deploy"], input: bytes("t"))
        #expect(synced.status == 64, "\(synced.stderr)")
        let combined = try d.cli(["add", "--require", "presence,passcode", "--service", "prod", "--account", "deploy"], input: bytes("t"))
        #expect(combined.status == 64)
        #expect(combined.stderr.contains("userPresence (1) combines only with"), "\(combined.stderr)")
        let unknown = try d.cli(["add", "--require", "fingerprint", "--service", "prod", "--account", "deploy"], input: bytes("t"))
        #expect(unknown.status == 64)
    }

    @Test func updatingTheSecretOfAnItemThatAsksFirstAsksOnce() throws {
        let prompt = try ScriptedPrompt(answers: [ScriptedPrompt.passcode, ScriptedPrompt.passcode])
        let d = prompt.daemon
        #expect(try d.cli(["add", "--require", "presence", "--service", "prod", "--account", "deploy"], input: bytes("t")).status == 0)
        #expect(try d.cli(["update", "--service", "prod", "--account", "deploy"], input: bytes("new")).status == 0)
        #expect(prompt.prompts == 1)
        let read = try d.cli(["get", "--service", "prod", "--account", "deploy"])
        #expect(String(decoding: read.stdout, as: UTF8.self) == "new", "\(read)")
        #expect(prompt.prompts == 2)
    }
}
