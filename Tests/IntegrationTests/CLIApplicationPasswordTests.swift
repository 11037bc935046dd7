import Foundation
import KeychainClient
import Testing

/// `keychain add --require app-password`, `get` and `update` of such an item (issue 29): the
/// application password comes from the terminal without echo or from the first line of
/// standard input with --app-password-stdin, never from argv or the environment; the real CLI
/// against the real daemon.
@Suite("CLI: the application password")
struct CLIApplicationPasswordTests {
    static let item = ["--service", "prod", "--account", "deploy"]

    /// A daemon holding `secret` sealed under `password`, added through the CLI.
    static func daemonWithSealedToken(password: String = "correct horse", secret: String = "s3cret") throws -> RunningDaemon {
        let d = try RunningDaemon()
        let added = try d.cli(["add", "--require", "app-password", "--app-password-stdin"] + item, input: bytes("\(password)\n\(secret)"))
        #expect(added.status == 0, "\(added.stderr)")
        return d
    }

    @Test func theRightPasswordOnStandardInputReadsTheSecretExactly() throws {
        let d = try Self.daemonWithSealedToken()
        let read = try d.cli(["get", "--app-password-stdin"] + Self.item, input: bytes("correct horse\n"))
        #expect(read.status == 0, "\(read.stderr)")
        #expect(read.text == "s3cret")
    }

    @Test func getJSONShowsTheConstraintInAccc() throws {
        let d = try Self.daemonWithSealedToken()
        let listed = try d.cli(["get", "--json", "--app-password-stdin"] + Self.item, input: bytes("correct horse\n"))
        #expect(listed.text.contains("\"accc\":\"ak;2147483648\""), "\(listed.text)")
    }

    @Test func aWrongPasswordIsExit6AndSaysSoWithoutRepeatingIt() throws {
        let d = try Self.daemonWithSealedToken()
        let wrong = try d.cli(["get", "--app-password-stdin"] + Self.item, input: bytes("battery staple\n"))
        #expect(wrong.status == 6)
        #expect(wrong.stderr.contains("application password is not correct") && wrong.stderr.contains("four wrong"), "\(wrong.stderr)")
        #expect(!wrong.stderr.contains("battery") && wrong.stdout.isEmpty)
    }

    @Test func withoutThePasswordGetIsExit4AndSaysHowToGiveIt() throws {
        let d = try Self.daemonWithSealedToken()
        let absent = try d.cli(["get"] + Self.item)
        #expect(absent.status == 4)
        #expect(absent.stderr.contains("sealed under an application password") && absent.stderr.contains("--app-password-stdin"), "\(absent.stderr)")
        #expect(!absent.stderr.contains("keychain unlock"), "not the lock-state hint: \(absent.stderr)")
    }

    @Test func addWithoutAPasswordOffATerminalIsRefusedBeforeTheSecretIsRead() throws {
        let d = try RunningDaemon()
        let refused = try d.cli(["add", "--require", "app-password"] + Self.item, input: bytes("s3cret"))
        #expect(refused.status == 4)
        #expect(refused.stderr.contains("--app-password-stdin") && refused.stderr.contains("nothing was read or stored"), "\(refused.stderr)")
        #expect(try d.cli(["get", "--app-password-stdin"] + Self.item, input: bytes("x\n")).status == 2)
    }

    @Test func anEmptyPasswordIsRefused() throws {
        let d = try RunningDaemon()
        let empty = try d.cli(["add", "--require", "app-password", "--app-password-stdin"] + Self.item, input: bytes("\ns3cret"))
        #expect(empty.status == 64, "\(empty.stderr)")
    }

    @Test func thePasswordFlagBelongsToSealedItemsOnly() throws {
        let d = try RunningDaemon()
        let misplaced = try d.cli(["add", "--app-password-stdin"] + Self.item, input: bytes("pw\ns3cret"))
        #expect(misplaced.status == 64, "\(misplaced.stderr)")
    }

    @Test func updateSealsTheNewSecretUnderTheGivenPassword() throws {
        let d = try Self.daemonWithSealedToken()
        let updated = try d.cli(["update", "--app-password-stdin"] + Self.item, input: bytes("correct horse\nn3w"))
        #expect(updated.status == 0, "\(updated.stderr)")
        #expect(try d.cli(["get", "--app-password-stdin"] + Self.item, input: bytes("correct horse\n")).text == "n3w")
        let without = try d.cli(["update"] + Self.item, input: bytes("other"))
        #expect(without.status == 4 && without.stderr.contains("--app-password-stdin"), "\(without.stderr)")
    }

    @Test func onATerminalThePasswordIsTypedWithoutEcho() throws {
        let d = try RunningDaemon()
        let added = try onTerminal(d, "add --require app-password --service prod --account deploy",
                                   typing: ["Tr0ub4dor", "Tr0ub4dor", "s3cret", "s3cret"])
        #expect(added.status == 0, "\(added.text)")
        #expect(added.text.contains("Application password:") && !added.text.contains("Tr0ub4dor"), "\(added.text)")
        let read = try onTerminal(d, "get --service prod --account deploy", typing: ["Tr0ub4dor"])
        #expect(read.status == 0, "\(read.text)")
        #expect(read.text.contains("s3cret") && !read.text.contains("Tr0ub4dor"), "\(read.text)")
    }
}
