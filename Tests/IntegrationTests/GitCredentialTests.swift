import Foundation
import KeychainClient
import KeychainModel
import Testing

/// git-credential-keychain driven by the real `git credential fill/approve/reject`.
@Suite("The git credential helper", .serialized)
struct GitCredentialTests {
    static var helper: String { Binaries.directory + "/git-credential-keychain" }

    /// Runs git (or the helper itself) with a private global config naming the helper.
    func run(_ d: RunningDaemon, _ executable: String, _ arguments: [String], input: String,
             useHttpPath: Bool = false, asUser uid: UInt32? = nil) throws -> CLIResult {
        let config = d.root + "/gitconfig"
        try "[credential]\n\thelper = \(Self.helper)\n\tuseHttpPath = \(useHttpPath)\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        chmod(config, 0o644)
        return try runExecutable(executable, arguments,
                                 environment: ["KEYCHAIN_SOCKET": d.socketPath, "GIT_CONFIG_GLOBAL": config, "GIT_CONFIG_NOSYSTEM": "1",
                                               "GIT_TERMINAL_PROMPT": "0", "HOME": d.root, "PATH": "/usr/bin:/bin"],
                                 input: Array(input.utf8), asUser: uid)
    }

    func git(_ d: RunningDaemon, _ action: String, _ input: String, useHttpPath: Bool = false, asUser uid: UInt32? = nil) throws -> CLIResult {
        try run(d, "/usr/bin/git", ["credential", action], input: input, useHttpPath: useHttpPath, asUser: uid)
    }

    let bob = "protocol=https\nhost=git.example.com\nusername=bob\npassword=s3cret-token\n"

    @Test func approveThenFillReturnsTheStoredCredential() throws {
        let d = try RunningDaemon()
        #expect(try git(d, "approve", bob).status == 0)
        let fill = try git(d, "fill", "protocol=https\nhost=git.example.com\n")
        #expect(fill.status == 0, "\(fill.stderr)")
        #expect(fill.text.contains("username=bob\n"))
        #expect(fill.text.contains("password=s3cret-token\n"))
        // It is an internet password the CLI finds too.
        let cli = try d.cli(["get", "--class", "internet-password", "--server", "git.example.com", "--protocol", "https", "--account", "bob"])
        #expect(cli.stdout == bytes("s3cret-token"))
    }

    @Test func rejectErasesTheCredentialAndGitFallsBackToAsking() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", bob)
        #expect(try git(d, "reject", bob).status == 0)
        let fill = try git(d, "fill", "protocol=https\nhost=git.example.com\n")
        #expect(fill.status != 0)  // no helper answer, and prompts are off
        #expect(!fill.text.contains("s3cret-token"))
    }

    @Test func rejectWithAnotherPasswordKeepsTheStoredOne() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", bob)
        _ = try run(d, Self.helper, ["erase"], input: "protocol=https\nhost=git.example.com\nusername=bob\npassword=old-one\n")
        #expect(try git(d, "fill", "protocol=https\nhost=git.example.com\n").text.contains("password=s3cret-token"))
    }

    @Test func useHttpPathKeepsOneCredentialPerRepository() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", "protocol=https\nhost=git.example.com\npath=team/one.git\nusername=u1\npassword=p1\n", useHttpPath: true)
        _ = try git(d, "approve", "protocol=https\nhost=git.example.com\npath=team/two.git\nusername=u2\npassword=p2\n", useHttpPath: true)
        let one = try git(d, "fill", "protocol=https\nhost=git.example.com\npath=team/one.git\n", useHttpPath: true)
        let two = try git(d, "fill", "protocol=https\nhost=git.example.com\npath=team/two.git\n", useHttpPath: true)
        #expect(one.text.contains("password=p1") && two.text.contains("password=p2"))
        #expect(try git(d, "fill", "protocol=https\nhost=git.example.com\npath=team/three.git\n", useHttpPath: true).status != 0)
    }

    @Test func portsAndProtocolsAreSeparateCredentials() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", "protocol=https\nhost=git.example.com:8443\nusername=a\npassword=on-8443\n")
        _ = try git(d, "approve", "protocol=http\nhost=git.example.com\nusername=a\npassword=plain-http\n")
        #expect(try git(d, "fill", "protocol=https\nhost=git.example.com:8443\n").text.contains("password=on-8443"))
        #expect(try git(d, "fill", "protocol=http\nhost=git.example.com\n").text.contains("password=plain-http"))
        #expect(try git(d, "fill", "protocol=https\nhost=git.example.com\n").status != 0)
    }

    @Test func newerAttributesAreKeptAndUnknownKeysIgnored() throws {
        let d = try RunningDaemon()
        let store = "capability[]=authtype\nprotocol=https\nhost=git.example.com\nusername=bob\npassword=tok\n"
            + "password_expiry_utc=2000000000\noauth_refresh_token=refresh-me\nwwwauth[]=Bearer realm=\"x\"\nsomething_new=1\n"
        #expect(try run(d, Self.helper, ["store"], input: store).status == 0)
        let got = try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\nwwwauth[]=Basic\n")
        #expect(got.text == "username=bob\npassword=tok\npassword_expiry_utc=2000000000\noauth_refresh_token=refresh-me\n")
        // Erasing takes the refresh token too.
        _ = try run(d, Self.helper, ["erase"], input: "protocol=https\nhost=git.example.com\nusername=bob\n")
        #expect(try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n").text.isEmpty)
        #expect(try d.cli(["list", "--class", "internet-password", "--json"]).text.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
    }

    // MARK: password_expiry_utc, as git 2.41 and later send it

    @Test func aCredentialIsNotAnsweredAfterItsExpiry() throws {
        let d = try RunningDaemon()
        let expiry = Int(Date().timeIntervalSince1970) + 8
        let store = "protocol=https\nhost=git.example.com\nusername=bob\npassword=short-lived\npassword_expiry_utc=\(expiry)\n"
        #expect(try run(d, Self.helper, ["store"], input: store).status == 0)
        let before = try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n")
        #expect(before.text == "username=bob\npassword=short-lived\npassword_expiry_utc=\(expiry)\n")
        while Date().timeIntervalSince1970 < Double(expiry) + 0.5 { usleep(200_000) }
        #expect(try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n").text.isEmpty)
        // Once expired it takes no room: the renewed token is stored, not refused as a duplicate.
        #expect(try run(d, Self.helper, ["store"], input: "protocol=https\nhost=git.example.com\nusername=bob\npassword=renewed\n").status == 0)
        #expect(try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n").text == "username=bob\npassword=renewed\n")
    }

    @Test func aCredentialStoredAlreadyExpiredIsNeverAnswered() throws {
        let d = try RunningDaemon()
        let store = "protocol=https\nhost=git.example.com\nusername=bob\npassword=stale\npassword_expiry_utc=1000000000\n"
        #expect(try run(d, Self.helper, ["store"], input: store).status == 0)
        #expect(try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n").text.isEmpty)
    }

    @Test func storingAgainWithoutAnExpiryDropsTheOldOne() throws {
        let d = try RunningDaemon()
        let later = Int(Date().timeIntervalSince1970) + 3_600
        _ = try run(d, Self.helper, ["store"], input: "protocol=https\nhost=git.example.com\nusername=bob\npassword=one\npassword_expiry_utc=\(later)\n")
        _ = try run(d, Self.helper, ["store"], input: "protocol=https\nhost=git.example.com\nusername=bob\npassword=two\n")
        #expect(try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n").text == "username=bob\npassword=two\n")
    }

    @Test func theExpiryIsTheItemsExpdThatKeychainListShows() throws {
        let d = try RunningDaemon()
        _ = try run(d, Self.helper, ["store"], input: "protocol=https\nhost=git.example.com\nusername=bob\npassword=tok\npassword_expiry_utc=2000000000\n")
        let list = try d.cli(["list", "--class", "internet-password"])
        #expect(list.text.contains("EXPIRES"))
        #expect(list.text.contains("2033-05-18T03:33:20Z"))
    }

    @Test func aLockedKeychainMakesGetFailQuietlyWithAHint() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", bob)
        _ = try d.cli(["passcode", "set"], input: bytes("1234\n"))
        _ = try d.cli(["lock"])
        let got = try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n")
        #expect(got.status == 0 && got.stdout.isEmpty)
        #expect(got.stderr.contains("keychain unlock"))
        let fill = try git(d, "fill", "protocol=https\nhost=git.example.com\n")
        #expect(fill.status != 0 && !fill.text.contains("s3cret"))
    }

    @Test func anUnreachableDaemonMakesGetFailQuietly() throws {
        let d = try RunningDaemon(start: false)
        let got = try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n")
        #expect(got.status == 0 && got.stdout.isEmpty)
        #expect(got.stderr.contains("cannot reach keychaind"))
    }

    @Test func aCredentialStoredByOneUidIsInvisibleToAnother() throws {
        let d = try RunningDaemon(config: "socket_mode = \"0666\"\nunknown_callers = \"private-group\"")
        let other = try MultiUserTests.user("kcapp-b")
        _ = try git(d, "approve", bob)
        let theirs = try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n", asUser: other)
        #expect(theirs.stdout.isEmpty)
        _ = try run(d, Self.helper, ["store"], input: "protocol=https\nhost=git.example.com\nusername=other\npassword=theirs\n", asUser: other)
        #expect(try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n", asUser: other).text.contains("password=theirs"))
        #expect(try git(d, "fill", "protocol=https\nhost=git.example.com\n").text.contains("password=s3cret-token"))
    }

    func storedAccounts(_ d: RunningDaemon) throws -> [String] {
        let listed = try d.cli(["list", "--class", "internet-password", "--json"])
        let items = try JSONSerialization.jsonObject(with: Data(listed.stdout)) as? [[String: Any]] ?? []
        return items.compactMap { $0["acct"] as? String }.sorted()
    }

    @Test func aFillWithoutPathFindsACredentialStoredWithOne() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", "protocol=https\nhost=git.example.com\npath=team/one.git\nusername=u1\npassword=p1\n", useHttpPath: true)
        let fill = try git(d, "fill", "protocol=https\nhost=git.example.com\npath=team/one.git\n")
        #expect(fill.status == 0, "\(fill.stderr)")
        #expect(fill.text.contains("username=u1\n") && fill.text.contains("password=p1\n"))
    }

    @Test func aRejectWithoutPathRemovesPathSpecificCredentialsToo() throws {
        let d = try RunningDaemon()
        _ = try git(d, "approve", "protocol=https\nhost=git.example.com\npath=team/one.git\nusername=u1\npassword=p1\n", useHttpPath: true)
        _ = try git(d, "approve", "protocol=https\nhost=git.example.com\npath=team/two.git\nusername=u2\npassword=p2\n", useHttpPath: true)
        _ = try git(d, "approve", "protocol=https\nhost=other.example.com\nusername=u3\npassword=p3\n")
        #expect(try git(d, "reject", "protocol=https\nhost=git.example.com\n").status == 0)
        #expect(try storedAccounts(d) == ["u3"])
    }

    @Test func aFillMatchingSeveralReturnsTheOneWithoutPathThenTheNewest() throws {
        let d = try RunningDaemon()
        func approve(_ path: String?, _ user: String) throws {
            let line = path.map { "path=\($0)\n" } ?? ""
            _ = try git(d, "approve", "protocol=https\nhost=git.example.com\n\(line)username=\(user)\npassword=pw-\(user)\n", useHttpPath: true)
        }
        func filled() throws -> String { try git(d, "fill", "protocol=https\nhost=git.example.com\n").text }
        try approve("team/one.git", "one")
        try approve("team/two.git", "two")
        #expect(try filled().contains("username=two\n"))  // the newest
        try approve("team/one.git", "one")                 // stored again: now the newest
        #expect(try filled().contains("username=one\n"))
        try approve(nil, "hostwide")
        try approve("team/two.git", "two")
        #expect(try filled().contains("username=hostwide\n"))  // stored without a path: exact
    }

    @Test func eraseWithAPasswordAndNoUsernameRemovesExactlyTheCredentialsWithThatPassword() throws {
        let d = try RunningDaemon()
        for (user, password) in [("alice", "other"), ("bob", "shared"), ("carol", "shared")] {
            _ = try git(d, "approve", "protocol=https\nhost=git.example.com\nusername=\(user)\npassword=\(password)\n")
        }
        let erase = try run(d, Self.helper, ["erase"], input: "protocol=https\nhost=git.example.com\npassword=shared\n")
        #expect(erase.status == 0, "\(erase.stderr)")
        #expect(try storedAccounts(d) == ["alice"])
    }

    @Test func certCredentialsAreStoredAndFoundByTheirCertificateFile() throws {
        let d = try RunningDaemon()
        // What git sends for a client certificate's passphrase (http.sslCertPasswordProtected).
        let approve = try git(d, "approve", "protocol=cert\nhost=\nusername=\npath=/home/me/client.p12\npassword=passphrase\n")
        #expect(approve.status == 0, "\(approve.stderr)")
        let fill = try git(d, "fill", "protocol=cert\nhost=\npath=/home/me/client.p12\n")
        #expect(fill.status == 0, "\(fill.stderr)")
        #expect(fill.text.contains("password=passphrase\n"))
        #expect(try git(d, "fill", "protocol=cert\nhost=\npath=/home/me/other.p12\n").status != 0)
    }

    @Test func helpPrintsUsageWithoutReadingStandardInput() throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.helper)
        p.arguments = ["--help"]
        let stdin = Pipe(), stdout = Pipe()
        p.standardInput = stdin  // left open, as a terminal would be
        p.standardOutput = stdout
        try p.run()
        let deadline = Date().addingTimeInterval(10)
        while p.isRunning && Date() < deadline { usleep(10_000) }
        let finished = !p.isRunning
        if !finished { kill(p.processIdentifier, SIGKILL) }
        p.waitUntilExit()
        try stdin.fileHandleForWriting.close()
        #expect(finished, "--help waited for standard input")
        #expect(p.terminationStatus == 0)
        #expect(String(decoding: stdout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).contains("usage: git-credential-keychain"))
    }

    @Test func anUnreachableDaemonMessageNamesTheSocketAndKEYCHAIN_SOCKET() throws {
        let d = try RunningDaemon(start: false)
        let got = try run(d, Self.helper, ["get"], input: "protocol=https\nhost=git.example.com\n")
        #expect(got.stdout.isEmpty)
        #expect(got.stderr.contains(d.socketPath), "\(got.stderr)")
        #expect(got.stderr.contains("KEYCHAIN_SOCKET"), "\(got.stderr)")
    }
}
