import Foundation
import KeychainModel
import Testing

/// Exit codes of docs/cli.md.
enum Exit {
    static let success: Int32 = 0, other: Int32 = 1, notFound: Int32 = 2, duplicate: Int32 = 3, locked: Int32 = 4
    static let denied: Int32 = 5, authFailed: Int32 = 6, unreachable: Int32 = 7, usage: Int32 = 64
}

@Suite("The keychain CLI against the real daemon", .serialized)
struct CLITests {
    let item = ["--service", "api.example.com", "--account", "alice"]

    @Test func addThenGetWritesExactlyTheSecretBytes() throws {
        let d = try RunningDaemon()
        let secret: [UInt8] = [0x74, 0x00, 0x0A, 0xFF, 0x0A]  // NUL, newlines, a non-UTF-8 byte
        #expect(try d.cli(["add"] + item, input: secret).status == Exit.success)
        let got = try d.cli(["get"] + item)
        #expect(got.status == Exit.success)
        #expect(got.stdout == secret)
    }

    @Test func getOfAMissingItemExitsNotFound() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["get"] + item)
        #expect(r.status == Exit.notFound)
        #expect(r.stdout.isEmpty)
        #expect(r.stderr.contains("keychain list"))
    }

    @Test func addingTwiceExitsDuplicateAndKeepsTheFirst() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("first"))
        let r = try d.cli(["add"] + item, input: bytes("second"))
        #expect(r.status == Exit.duplicate)
        #expect(r.stderr.contains("keychain update"))
        #expect(try d.cli(["get"] + item).stdout == bytes("first"))
    }

    @Test func updateReplacesTheSecretFromStandardInput() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("old"))
        #expect(try d.cli(["update"] + item, input: bytes("new")).status == Exit.success)
        #expect(try d.cli(["get"] + item).stdout == bytes("new"))
    }

    @Test func updateWithKeepSecretChangesOnlyAttributes() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("kept"))
        #expect(try d.cli(["update", "--keep-secret", "--label", "Renamed"] + item).status == Exit.success)
        #expect(try d.cli(["get"] + item).stdout == bytes("kept"))
        #expect(try d.cli(["list"]).text.contains("Renamed"))
    }

    @Test func deleteRemovesAndASecondDeleteExitsNotFound() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("x"))
        #expect(try d.cli(["delete"] + item).status == Exit.success)
        #expect(try d.cli(["delete"] + item).status == Exit.notFound)
    }

    @Test func listShowsAttributesButNeverSecrets() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--label", "My token"] + item, input: bytes("SECRET-VALUE-123"))
        let r = try d.cli(["list"])
        #expect(r.status == Exit.success)
        #expect(r.text.contains("api.example.com"))
        #expect(r.text.contains("alice"))
        #expect(r.text.contains("My token"))
        #expect(r.text.contains("when-unlocked"))
        #expect(!r.text.contains("SECRET-VALUE-123"))
        let json = try d.cli(["list", "--json"])
        #expect(!json.text.contains("SECRET") && !json.text.contains("v_Data"))
    }

    @Test func jsonOutputIsParseableAndCarriesTheSecretInBase64() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("tok"))
        let r = try d.cli(["get", "--json"] + item)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout)) as? [String: Any])
        #expect(object["acct"] as? String == "alice")
        #expect(object["v_Data"] as? String == Data(bytes("tok")).base64EncodedString())
        let list = try #require(try JSONSerialization.jsonObject(with: Data(try d.cli(["list", "--json"]).stdout)) as? [[String: Any]])
        #expect(list.count == 1)
        let status = try #require(try JSONSerialization.jsonObject(with: Data(try d.cli(["status", "--json"]).stdout)) as? [String: Any])
        #expect(status["state"] as? String == "unlocked")
    }

    @Test func jsonErrorsCarryTheStatusToo() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["get", "--json"] + item)
        #expect(r.status == Exit.notFound)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(r.stdout)) as? [String: Any])
        #expect(object["status"] as? Int == -25300)
        #expect(object["error"] as? String == "errSecItemNotFound")
    }

    @Test func internetPasswordsAreNamedByServerProtocolPortAndPath() throws {
        let d = try RunningDaemon()
        let inet = ["--class", "internet-password", "--server", "git.example.com", "--protocol", "https", "--account", "bob"]
        #expect(try d.cli(["add"] + inet + ["--port", "443", "--path", "/repo.git"], input: bytes("pat")).status == Exit.success)
        #expect(try d.cli(["get"] + inet + ["--port", "443", "--path", "/repo.git"]).stdout == bytes("pat"))
        #expect(try d.cli(["get"] + inet + ["--port", "8443"]).status == Exit.notFound)
        let json = try d.cli(["get", "--json"] + inet)
        #expect(json.text.contains("\"ptcl\":\"htps\""))
    }

    @Test func accessibilityOptionSetsTheProtectionClass() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--accessible", "after-first-unlock-this-device-only"] + item, input: bytes("x"))
        #expect(try d.cli(["get", "--json"] + item).text.contains("\"pdmn\":\"cku\""))
        #expect(try d.cli(["add", "--accessible", "sometimes"] + item, input: []).status == Exit.usage)
    }

    @Test func foreignAccessGroupExitsAccessDenied() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["add", "--access-group", "someone.else"] + item, input: bytes("x"))
        #expect(r.status == Exit.denied)
        #expect(r.stderr.contains("someone.else"))
    }

    @Test func lockedKeychainExitsLockedAndUnlockRestoresAccess() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("x"))
        #expect(try d.cli(["passcode", "set"], input: bytes("1234\n")).status == Exit.success)
        #expect(try d.cli(["lock"]).status == Exit.success)
        let locked = try d.cli(["get"] + item)
        #expect(locked.status == Exit.locked)
        #expect(locked.stderr.contains("keychain unlock"))
        #expect(try d.cli(["unlock"], input: bytes("4321\n")).status == Exit.authFailed)
        #expect(try d.cli(["unlock"], input: bytes("1234\n")).status == Exit.success)
        #expect(try d.cli(["get"] + item).stdout == bytes("x"))
    }

    @Test func aNewPasscodeOnATerminalIsAskedTwiceWithoutEcho() throws {
        let d = try RunningDaemon()
        let mismatch = try onTerminal(d, "passcode set", typing: ["typed-1234", "typed-9999"])
        #expect(mismatch.status == Exit.usage)
        #expect(mismatch.text.contains("Again:") && mismatch.text.contains("differ"))
        #expect(try d.cli(["status"]).text.contains("passcode: false"))
        let match = try onTerminal(d, "passcode set", typing: ["typed-1234", "typed-1234"])
        #expect(match.status == Exit.success)
        #expect(!match.text.contains("typed-1234"))  // never echoed
        #expect(try d.cli(["status"]).text.contains("passcode: true"))
    }

    /// docs/cli.md, "Escaping": the same escapes whether standard output is a terminal or not.
    @Test func listEscapesOnATerminalAsOnAPipe() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--service", "s", "--account", "a", "--label", "\u{1B}]0;owned\u{07}\u{202E}"], input: bytes("x"))
        let escaped = #"\x1B]0;owned\x07\u{202E}"#
        #expect(try d.cli(["list"]).text.contains(escaped))
        let terminal = try onTerminal(d, "list", typing: [])
        #expect(terminal.status == Exit.success)
        #expect(terminal.text.contains(escaped))
        #expect(!terminal.text.contains("\u{1B}]0"))
    }

    @Test func passcodeChangeAndRemoveReadOneLinePerPasscode() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("x"))
        _ = try d.cli(["passcode", "set"], input: bytes("one\n"))
        #expect(try d.cli(["passcode", "change"], input: bytes("wrong\ntwo\n")).status == Exit.authFailed)
        #expect(try d.cli(["passcode", "change"], input: bytes("one\ntwo\n")).status == Exit.success)
        try d.restart()
        #expect(try d.cli(["get"] + item).status == Exit.locked)
        #expect(try d.cli(["unlock"], input: bytes("two\n")).status == Exit.success)
        #expect(try d.cli(["passcode", "remove"], input: bytes("two\n")).status == Exit.success)
        try d.restart()
        #expect(try d.cli(["get"] + item).stdout == bytes("x"))
    }

    @Test func unreachableDaemonExitsUnreachable() throws {
        let d = try RunningDaemon(start: false)
        let r = try d.cli(["status"])
        #expect(r.status == Exit.unreachable)
        #expect(r.stderr.contains("keychaind"))
    }

    @Test func leadingSocketOptionIsHonoured() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["--socket", "/tmp/definitely-not-here.sock", "status"])
        #expect(r.status == Exit.unreachable)
        #expect(try d.cli(["--socket", d.socketPath, "status"]).status == Exit.success)
    }

    @Test func usageErrorsExit64() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["get", "--bogus"]).status == Exit.usage)
        #expect(try d.cli(["frobnicate"]).status == Exit.usage)
        #expect(try d.cli(["get", "--service", "s", "--server", "x"]).status == Exit.usage)
    }

    @Test func oversizedSecretIsRefusedNotTruncated() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["add"] + item, input: [UInt8](repeating: 0x41, count: KeychainLimits.maxSecretBytes + 1))
        #expect(r.status == Exit.usage)
        #expect(try d.cli(["get"] + item).status == Exit.notFound)
    }

    @Test func nonAdminCannotLockUnlockOrChangeThePasscode() throws {
        let d = try RunningDaemon(config: "socket_mode = \"0666\"")
        let nobody: UInt32 = 65534
        #expect(try d.cli(["lock"], asUser: nobody).status == Exit.denied)
        #expect(try d.cli(["passcode", "set"], input: bytes("x\n"), asUser: nobody).status == Exit.denied)
        #expect(try d.cli(["status"]).text.contains("passcode: false"))
    }

    @Test func unknownUidsAreRefusedByDefault() throws {
        let d = try RunningDaemon(config: "socket_mode = \"0666\"")
        let r = try d.cli(["get"] + item, asUser: 65534)
        #expect(r.status == Exit.denied)
        #expect(r.stderr.contains("matches no application"))
        #expect(r.stderr.contains("[[app]]"))
    }

    @Test func withPrivateGroupsEachUnknownUidSeesOnlyItsOwnItems() throws {
        let d = try RunningDaemon(config: "socket_mode = \"0666\"\nunknown_callers = \"private-group\"")
        _ = try d.cli(["add"] + item, input: bytes("root's"))
        #expect(try d.cli(["get"] + item, asUser: 65534).status == Exit.notFound)
        #expect(try d.cli(["add"] + item, input: bytes("nobody's"), asUser: 65534).status == Exit.success)
        #expect(try d.cli(["get"] + item, asUser: 65534).stdout == bytes("nobody's"))
        #expect(try d.cli(["get"] + item).stdout == bytes("root's"))
    }
}
