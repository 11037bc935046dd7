import Foundation
import KeychainClient
import Testing

/// Issue 29's "Done when", as an operator lives it: a token stored with
/// `keychain add --require presence`; another process of the same user reads it; the prompt
/// names that process by the executable the kernel reports, and the item's label; the person
/// saying no gives that process errSecUserCanceled (-128); the passcode gives it the secret.
@Suite("Operator story: a token that asks first")
struct OperatorPresenceStoryTests {
    @Test func anotherProcessReadingTheTokenMakesThePromptNameItAndThePersonDecides() throws {
        let prompt = try ScriptedPrompt(answers: ["cancel", ScriptedPrompt.passcode])
        let d = prompt.daemon
        let added = try d.cli(["add", "--require", "presence", "--service", "prod", "--account", "deploy", "--label", "prod token"],
                              input: bytes("tok-3141"))
        #expect(added.status == 0, "\(added.stderr)")
        #expect(prompt.prompts == 0, "adding asks nobody")

        // The reader: another process of the same user, here the keychain CLI's own `get`.
        let reader = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let readerExecutable = ((reader as NSString).deletingLastPathComponent as NSString).appendingPathComponent("keychain")
        let kernelPath = (readerExecutable as NSString).resolvingSymlinksInPath

        let refused = try d.cli(["get", "--service", "prod", "--account", "deploy", "--reason", "deploy release 42"])
        #expect(refused.status == 8, "\(refused.stderr)")
        #expect(refused.stdout.isEmpty)
        #expect(refused.stderr.contains("said no") && refused.stderr.contains("errSecUserCanceled (-128)"), "\(refused.stderr)")
        #expect(prompt.said.contains("SETDESC \(kernelPath) (pid "), "\(prompt.said)")
        #expect(prompt.said.contains("wants to use the keychain item \u{201C}prod token\u{201D}.%0AIts reason: deploy release 42"), "\(prompt.said)")

        let allowed = try d.cli(["get", "--service", "prod", "--account", "deploy"])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(allowed.stdout == bytes("tok-3141"))
        #expect(prompt.prompts == 2)
        #expect(!prompt.said.contains(ScriptedPrompt.passcode))
    }
}
