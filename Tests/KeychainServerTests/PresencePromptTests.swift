import Foundation
import KeychainModel
import Testing
@testable import KeychainServer

/// keychaind's own prompt (issue 29): where it may appear, what it says, and what the person's
/// answer means. Driven by the Secret Service tests' scripted pinentry
/// (Tests/SecretServiceScripts/fake_pinentry.py), through a wrapper that gives it its answers,
/// since keychaind starts pinentry with only the environment its [prompt] names.
@Suite("keychaind's presence prompt")
struct PresencePromptTests {
    static let fakePinentry = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../SecretServiceScripts/fake_pinentry.py").standardized.path

    /// A pinentry answering `answers` in turn and logging what it was told to `log`.
    static func scriptedPinentry(answers: [String]) throws -> (program: String, log: String) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("presence-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let program = directory + "/pinentry", log = directory + "/pinentry.log"
        try """
            #!/bin/sh
            FAKE_PINENTRY_ANSWERS='\(answers.joined(separator: ","))' FAKE_PINENTRY_LOG='\(log)' exec \(fakePinentry)
            """.write(toFile: program, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: program)
        return (program, log)
    }

    static func settings(pinentry: String) -> PromptSettings {
        var settings = PromptSettings()
        settings.pinentry = pinentry
        settings.display = ":7"
        return settings
    }

    static let request = PromptRequest(executable: "/usr/bin/deploy-tool", pid: 4242, label: "prod token", reason: "rotate the key")

    @Test func thePromptSectionIsRead() throws {
        let config = try DaemonConfig.parse("""
            [prompt]
            pinentry = "/usr/bin/pinentry-gnome3"
            display = ":0"
            wayland_display = "wayland-0"
            xauthority = "/run/user/1000/gdm/Xauthority"
            tty = "/dev/tty2"
            term = "xterm"
            """)
        #expect(config.prompt.pinentry == "/usr/bin/pinentry-gnome3")
        #expect(config.prompt.display == ":0")
        #expect(config.prompt.waylandDisplay == "wayland-0")
        #expect(config.prompt.xauthority == "/run/user/1000/gdm/Xauthority")
        #expect(config.prompt.tty == "/dev/tty2")
        #expect(config.prompt.term == "xterm")
    }

    @Test func aContextsMaximumAgeIsReadFromOneTo300Seconds() throws {
        #expect(try DaemonConfig.parse("").prompt.contextMaxAge == 300)
        #expect(try DaemonConfig.parse("[prompt]\ncontext_max_age_seconds = 2").prompt.contextMaxAge == 2)
        for value in ["0", "301", "\"60\"", "1.5"] {
            #expect(throws: DaemonConfig.ParseError.self, "\(value)") { try DaemonConfig.parse("[prompt]\ncontext_max_age_seconds = \(value)") }
        }
    }

    @Test func theContextPromptSaysItIsForItemsThatAskFirstWithTheReason() {
        let request = PromptRequest(executable: "/usr/bin/deploy-tool", pid: 4242, label: nil, reason: "ship\nit", forContext: true)
        #expect(request.description == "/usr/bin/deploy-tool (pid 4242) wants to use keychain items that ask first, for a while, without asking again.\nIts reason: ship\\u{a}it\nType the keychain passcode to allow it.")
    }

    @Test func aRelativePinentryOrATerminalOutsideDevIsRefused() {
        for text in ["[prompt]\npinentry = \"pinentry\"", "[prompt]\ntty = \"/tmp/fake-tty\"", "[prompt]\ncolour = \"red\""] {
            #expect(throws: DaemonConfig.ParseError.self, "\(text)") { try DaemonConfig.parse(text) }
        }
    }

    @Test func withoutADisplayOrTerminalThereIsNoWayToAsk() throws {
        let (program, _) = try Self.scriptedPinentry(answers: [])
        var settings = PromptSettings()
        settings.pinentry = program
        #expect(PresencePrompt(settings) == nil)
        #expect(PresencePrompt(Self.settings(pinentry: "/nonexistent/pinentry")) == nil)
        #expect(PresencePrompt(PromptSettings(), searchPath: "/nonexistent") == nil)
    }

    @Test func pinentryGetsOnlyTheEnvironmentTheConfigurationNames() {
        var settings = Self.settings(pinentry: "/bin/true")
        settings.tty = "/dev/tty3"
        let prompt = PresencePrompt(settings)
        #expect(prompt?.environment == ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "DISPLAY": ":7", "TERM": "linux"])
    }

    @Test func thePromptNamesTheExecutableTheLabelAndTheReason() throws {
        let (program, log) = try Self.scriptedPinentry(answers: ["1234"])
        let prompt = try #require(PresencePrompt(Self.settings(pinentry: program)))
        try prompt.ask(Self.request) { (passcode) throws(KeychainError) in
            guard passcode == SecretBytes(Array("1234".utf8)) else { throw KeychainError(.authFailed, "the passcode is not correct") }
        }
        let said = try String(contentsOfFile: log, encoding: .utf8)
        #expect(said.contains("SETDESC /usr/bin/deploy-tool (pid 4242) wants to use the keychain item \u{201C}prod token\u{201D}.%0AIts reason: rotate the key"), "\(said)")
        #expect(said.contains("SETPROMPT Passcode:"))
        #expect(!said.contains("1234"), "the passcode never reaches the log")
    }

    @Test func aLabelCannotDrawLinesOfItsOwn() {
        let forged = PromptRequest(executable: "/usr/bin/evil", pid: 1, label: "x\u{201D}.\nVerified by keychaind: /usr/bin/ssh\u{202E}", reason: nil)
        #expect(!forged.description.contains("\nVerified"))
        #expect(forged.description.contains("x\u{201D}.\\u{a}Verified by keychaind: /usr/bin/ssh\\u{202e}"), "\(forged.description)")
        let long = PromptRequest(executable: "/usr/bin/x", pid: 1, label: String(repeating: "a", count: 1000), reason: nil)
        #expect(long.description.count < 300)
    }

    /// Under the packaged system daemon (no CAP_SYS_PTRACE) another user's executable cannot
    /// be read: the prompt names what the kernel reports of the process, then its own claim.
    @Test func aProgramWhoseExecutableCannotBeReadIsNamedByItsUIDUnitAndCommand() {
        var request = PromptRequest(executable: nil, pid: 4242, label: "prod token", reason: nil)
        request.hidden = HiddenProgram(uid: 1001, userName: "alice", unit: .system("session-3.scope"), command: "python3")
        #expect(request.description.hasPrefix("A program whose executable cannot be read (pid 4242, uid 1001 (alice), unit session-3.scope, calls itself `python3`) wants to use the keychain item \u{201C}prod token\u{201D}."), "\(request.description)")
    }

    @Test func aHiddenProgramsNamesCannotDrawLinesOrEndTheirQuotation() {
        let hidden = HiddenProgram(uid: 1001, userName: "al\nice", unit: .user(uid: 1001, "x\u{202E}.service"), command: "ev`il\nok")
        #expect(hidden.shown == "uid 1001 (al\\u{a}ice), unit x\\u{202e}.service of user@1001.service, calls itself `ev\\u{60}il\\u{a}ok`")
    }

    @Test func aHiddenProgramWithNeitherNameNorUnitShowsItsUID() {
        #expect(HiddenProgram(uid: 1001, userName: nil, unit: nil, command: nil).shown == "uid 1001")
        #expect(PromptRequest(executable: nil, pid: 7, label: nil, reason: nil).program == "A program whose executable cannot be read (pid 7)")
    }

    @Test func cancellingIsUserCanceled() throws {
        let (program, _) = try Self.scriptedPinentry(answers: ["cancel"])
        let prompt = try #require(PresencePrompt(Self.settings(pinentry: program)))
        #expect(throws: KeychainError(.userCanceled, "")) {
            try prompt.ask(Self.request) { (_) throws(KeychainError) in }
        }
    }

    @Test func threeWrongPasscodesAreAuthFailedAndEachIsShown() throws {
        let (program, log) = try Self.scriptedPinentry(answers: ["a", "b", "c", "1234"])
        let prompt = try #require(PresencePrompt(Self.settings(pinentry: program)))
        var tries = 0
        #expect(throws: KeychainError(.authFailed, "")) {
            try prompt.ask(Self.request) { (_) throws(KeychainError) in
                tries += 1
                throw KeychainError(.authFailed, "the passcode is not correct")
            }
        }
        #expect(tries == 3)
        let said = try String(contentsOfFile: log, encoding: .utf8)
        #expect(said.components(separatedBy: "SETERROR the passcode is not correct").count - 1 == 3)
    }

    @Test func aPinentryThatCannotStartIsInteractionNotAllowed() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("presence-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        let program = directory + "/pinentry"
        try "#!/bin/sh\nexit 1\n".write(toFile: program, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: program)
        let prompt = try #require(PresencePrompt(Self.settings(pinentry: program)))
        #expect(throws: KeychainError(.interactionNotAllowed, "")) {
            try prompt.ask(Self.request) { (_) throws(KeychainError) in }
        }
    }
}
