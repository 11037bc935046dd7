import Foundation
import KeychainClient
import Testing

/// `keychain add --require app-password`, `get` and `update` of such an item, and keys
/// generated with it, which `key sign` and `key decrypt` then need it for (issue 29): the
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

    // MARK: keys (`key generate --require app-password`, `key sign`, `key decrypt`)

    /// A daemon holding an Ed25519 key sealed under `password`, generated through the CLI.
    static func daemonWithSealedKey(password: String = "correct horse", type: String = "ed25519") throws -> RunningDaemon {
        let d = try RunningDaemon()
        let made = try d.cli(["key", "generate", "--type", type, "--label", "release", "--require", "app-password",
                              "--app-password-stdin"], input: bytes("\(password)\n"))
        #expect(made.status == 0, "\(made.stderr)")
        return d
    }

    @Test func aGeneratedKeyWithAnApplicationPasswordSignsOnlyWithThePassword() throws {
        let d = try Self.daemonWithSealedKey()
        let c = KeychainConnection(socketPath: d.socketPath)
        let key = try #require(try KeychainKey.find(label: "release", connection: c).first)
        #expect(key.attributes["accc"] == .string("ak;2147483648"))
        let signed = try d.cli(["key", "sign", "--label", "release", "--app-password-stdin"], input: bytes("correct horse\nmessage"))
        #expect(signed.status == 0, "\(signed.stderr)")
        #expect(try key.verify(Array(signed.stdout), for: Array("message".utf8), algorithm: .ed25519))
        let without = try d.cli(["key", "sign", "--label", "release"], input: bytes("message"))
        #expect(without.status == 4 && without.stdout.isEmpty, "\(without.stderr)")
        #expect(without.stderr.contains("sealed under an application password") && without.stderr.contains("--app-password-stdin"), "\(without.stderr)")
        let wrong = try d.cli(["key", "sign", "--label", "release", "--app-password-stdin"], input: bytes("battery staple\nmessage"))
        #expect(wrong.status == 6 && wrong.stdout.isEmpty, "\(wrong.stderr)")
        #expect(!wrong.stderr.contains("battery"), "\(wrong.stderr)")
    }

    @Test func aSealedKeyDecryptsOnlyWithThePassword() throws {
        let d = try Self.daemonWithSealedKey(type: "x25519")
        let sealed = try d.cli(["key", "encrypt", "--label", "release"], input: bytes("plain"))
        #expect(sealed.status == 0, "no password to encrypt to its public half: \(sealed.stderr)")
        let opened = try d.cli(["key", "decrypt", "--label", "release", "--app-password-stdin"],
                               input: bytes("correct horse\n") + Array(sealed.stdout))
        #expect(opened.status == 0, "\(opened.stderr)")
        #expect(opened.text == "plain")
        #expect(try d.cli(["key", "decrypt", "--label", "release"], input: Array(sealed.stdout)).status == 4)
    }

    @Test func keyGenerateWithoutAPasswordOffATerminalMakesNoKey() throws {
        let d = try RunningDaemon()
        let refused = try d.cli(["key", "generate", "--type", "ed25519", "--label", "release", "--require", "app-password"])
        #expect(refused.status == 4, "\(refused.stderr)")
        #expect(try d.cli(["key", "list"]).text.isEmpty)
    }

    @Test func theKeysPasswordFlagBelongsToSealedKeysOnly() throws {
        let d = try RunningDaemon()
        let misplaced = try d.cli(["key", "generate", "--type", "ed25519", "--label", "plain", "--app-password-stdin"], input: bytes("pw\n"))
        #expect(misplaced.status == 64, "\(misplaced.stderr)")
        #expect(try d.cli(["key", "generate", "--type", "ed25519", "--label", "plain"]).status == 0)
        let signing = try d.cli(["key", "sign", "--label", "plain", "--app-password-stdin"], input: bytes("pw\nmessage"))
        #expect(signing.status == 64, "\(signing.stderr)")
    }

    @Test func keyGenerateTakesTheRequireCombinationsAddTakes() throws {
        let (d, _) = try ItemsThatAskFirstTests.daemon(answers: [])
        let made = try d.cli(["key", "generate", "--type", "ed25519", "--label", "both", "--require", "presence,app-password",
                              "--app-password-stdin"], input: bytes("pw\n"))
        #expect(made.status == 0, "\(made.stderr)")
        let c = KeychainConnection(socketPath: d.socketPath)
        #expect(try KeychainKey.find(label: "both", connection: c).first?.attributes["accc"] == .string("ak;2147483649"))
        #expect(try d.cli(["key", "generate", "--type", "ed25519", "--label", "x", "--require", "presence,passcode"]).status == 64)
    }

    @Test func onATerminalTheKeysPasswordIsTypedWithoutEcho() throws {
        let d = try RunningDaemon()
        let made = try onTerminal(d, "key generate --type ed25519 --label release --require app-password", typing: ["Tr0ub4dor", "Tr0ub4dor"])
        #expect(made.status == 0, "\(made.text)")
        #expect(made.text.contains("Application password:") && !made.text.contains("Tr0ub4dor"), "\(made.text)")
        // The data from standard input, the password typed at the terminal.
        let signature = d.root + "/signature"
        let signed = try onTerminal(d, "key sign --label release < /dev/null > \(signature)", typing: ["Tr0ub4dor"])
        #expect(signed.status == 0, "\(signed.text)")
        #expect(signed.text.contains("Application password:") && !signed.text.contains("Tr0ub4dor"), "\(signed.text)")
        let key = try #require(try KeychainKey.find(label: "release", connection: KeychainConnection(socketPath: d.socketPath)).first)
        let bytes = try #require(FileManager.default.contents(atPath: signature))
        #expect(try key.verify(Array(bytes), for: [], algorithm: .ed25519))
    }
}
