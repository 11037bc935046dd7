import Foundation
import KeychainModel
import Testing

/// git-credential-libsecret, built from the source Debian's git package ships, keeping git's
/// credentials in keychaind through the bridge: `git credential approve/fill/reject` on a
/// private session bus, and git's own helper cases (t/lib-credential.sh's helper_test, which
/// Debian does not ship, restated here under git's names).
@Suite("Secret Service: git-credential-libsecret")
struct SecretServiceGitCredentialTests {
    @Test func anApprovedCredentialIsAKeychainItemWithLibsecretsNetworkAttributesUntilRejected() throws {
        let git = try GitWithLibsecret()
        let credential = ["protocol=https", "host=git.example.com:8443", "path=team/repo.git",
                          "username=alice", "password=hunter2"]
        try git.expectQuiet(git.run("approve", credential, config: ["credential.useHttpPath=true"]))
        let items = try git.keychainItems()
        try #require(items.count == 1, "\(items)")
        #expect(items[0]["svce"] as? String == "secret-service:login")
        #expect(items[0]["labl"] as? String == "Git: https://git.example.com:8443/team/repo.git")
        let encoded = try #require((items[0]["xsat"] as? String).flatMap { Data(base64Encoded: $0) })
        #expect(try SecretServiceAttributes(encoded: Array(encoded)).dictionary == [
            "xdg:schema": "org.gnome.keyring.NetworkPassword", "protocol": "https", "server": "git.example.com",
            "port": "8443", "object": "team/repo.git", "user": "alice",
        ])
        let filled = try git.run("fill", ["protocol=https", "host=git.example.com:8443", "path=team/repo.git"],
                                 config: ["credential.useHttpPath=true"])
        #expect(filled.status == 0 && filled.lines == credential && filled.stderr.isEmpty, "\(filled.stderr)")
        try git.expectQuiet(git.run("reject", ["protocol=https", "host=git.example.com:8443", "path=team/repo.git"],
                                    config: ["credential.useHttpPath=true"]))
        #expect(try git.keychainItems().isEmpty)
    }

    /// secret-tool stores an item with exactly the attributes git-credential-libsecret looks
    /// for; with an [[app]] for each executable, git is not given it, and neither sees git's.
    @Test(arguments: [true, false])
    func gitAndSecretToolInTheirOwnAppsDoNotFindEachOthersCredentials(separated: Bool) throws {
        let helper = try LibsecretGitHelper.executable.get()
        let secretTool = try #require(realpath("/usr/bin/secret-tool", nil).map { p -> String in
            defer { free(p) }
            return String(cString: p)
        })
        let git = try GitWithLibsecret(config: !separated ? "" : """
            [[app]]
            id = "git"
            uids = [\(getuid())]
            executables = ["\(helper)"]
            groups = ["git.credentials"]
            [[app]]
            id = "secret-tool"
            uids = [\(getuid())]
            executables = ["\(secretTool)"]
            groups = ["secret-tool"]
            """)
        func tool(_ arguments: [String], input: String = "") throws -> CLIResult {
            try runExecutable(secretTool, arguments, environment: git.setup.environment, input: Array(input.utf8))
        }
        let question = ["protocol=https", "host=shared.example"]
        try git.expectQuiet(git.run("approve", question + ["username=alice", "password=git's"]))
        #expect(try tool(["store", "--label", "planted", "xdg:schema", "org.gnome.keyring.NetworkPassword",
                          "protocol", "https", "server", "shared.example", "user", "mallory"], input: "secret-tool's").status == 0)
        let found = try tool(["search", "--all", "server", "shared.example"])
        let filled = try git.run("fill", question)
        if separated {
            #expect(found.text.contains("secret = secret-tool's") && !found.text.contains("git's"), "\(found.text)")
            // Both items match what git asks; git is given its own, never the planted one.
            #expect(filled.lines == question + ["username=alice", "password=git's"])
            try git.expectQuiet(git.run("reject", question))
            #expect(try git.run("fill", question).lines == question + ["username=askpass-username", "password=askpass-password"])
            #expect(try tool(["lookup", "server", "shared.example"]).text == "secret-tool's")
        } else {
            #expect(found.text.contains("secret = secret-tool's") && found.text.contains("secret = git's"), "\(found.text)")
        }
    }

    @Test(arguments: GitHelperCase.all)
    func gitsHelperTest(_ helperCase: GitHelperCase) throws {
        let git = try GitWithLibsecret()
        for step in helperCase.steps {
            switch step {
            case .approve(let lines):
                try git.expectQuiet(git.run("approve", lines, config: helperCase.config))
            case .reject(let lines):
                try git.expectQuiet(git.run("reject", lines, config: helperCase.config))
            case .fill(let lines, let answer, let prompts):
                let filled = try git.run("fill", lines, config: helperCase.config)
                #expect(filled.status == 0, "\(filled.stderr)")
                #expect(filled.lines == answer)
                #expect(filled.stderrLines == prompts)
            }
        }
    }
}

/// One case of git's helper_test: what git is asked, in order, on a keychain that starts empty
/// (git runs its cases on one store in sequence; each case here first makes the state its
/// namesake relies on).
struct GitHelperCase: Sendable, CustomTestStringConvertible {
    enum Step: Sendable {
        case approve([String])
        case reject([String])
        /// `git credential fill` with these lines: what it prints, and what it asks askpass.
        case fill([String], answer: [String], prompts: [String])
    }

    let name: String
    var config: [String] = []
    let steps: [Step]
    var testDescription: String { "helper \(name)" }

    private static let example = ["protocol=https", "host=example.com"]
    private static let stored = Step.approve(example + ["username=store-user", "password=store-pass"])
    private static let twoUsers: [Step] = [
        .approve(example + ["username=user1", "password=pass1"]),
        .approve(example + ["username=user2", "password=pass2"]),
    ]

    /// git asks askpass for both, as it does when no helper answers.
    private static func askedForBoth(_ lines: [String], url: String) -> Step {
        let scheme = String(url.prefix { $0 != ":" }) + "://"
        return .fill(lines, answer: lines + ["username=askpass-username", "password=askpass-password"],
                     prompts: ["askpass: Username for '\(url)':",
                               "askpass: Password for '\(scheme)askpass-username@\(url.dropFirst(scheme.count))':"])
    }

    static let all: [GitHelperCase] = [
        GitHelperCase(name: "has no existing data", steps: [askedForBoth(example, url: "https://example.com")]),
        GitHelperCase(name: "stores password", steps: [stored]),
        GitHelperCase(name: "can retrieve password", steps: [
            stored, .fill(example, answer: example + ["username=store-user", "password=store-pass"], prompts: []),
        ]),
        GitHelperCase(name: "requires matching protocol", steps: [
            stored, askedForBoth(["protocol=http", "host=example.com"], url: "http://example.com"),
        ]),
        GitHelperCase(name: "requires matching host", steps: [
            stored, askedForBoth(["protocol=https", "host=other.tld"], url: "https://other.tld"),
        ]),
        GitHelperCase(name: "requires matching username", steps: [
            stored, .fill(example + ["username=other"], answer: example + ["username=other", "password=askpass-password"],
                          prompts: ["askpass: Password for 'https://other@example.com':"]),
        ]),
        GitHelperCase(name: "requires matching path", config: ["credential.useHttpPath=true"], steps: [
            .approve(["protocol=http", "host=path.tld", "path=foo.git", "username=user", "password=pass"]),
            askedForBoth(["protocol=http", "host=path.tld", "path=bar.git"], url: "http://path.tld/bar.git"),
        ]),
        GitHelperCase(name: "can forget host", steps: [
            stored, .reject(example), askedForBoth(example, url: "https://example.com"),
        ]),
        GitHelperCase(name: "can store multiple users", steps: twoUsers + [
            .fill(example + ["username=user1"], answer: example + ["username=user1", "password=pass1"], prompts: []),
            .fill(example + ["username=user2"], answer: example + ["username=user2", "password=pass2"], prompts: []),
        ]),
        GitHelperCase(name: "can forget user", steps: twoUsers + [
            .reject(example + ["username=user1"]),
            .fill(example + ["username=user1"], answer: example + ["username=user1", "password=askpass-password"],
                  prompts: ["askpass: Password for 'https://user1@example.com':"]),
        ]),
        GitHelperCase(name: "remembers other user", steps: twoUsers + [
            .reject(example + ["username=user1"]),
            .fill(example + ["username=user2"], answer: example + ["username=user2", "password=pass2"], prompts: []),
        ]),
        GitHelperCase(name: "can store empty username", steps: [
            .approve(["protocol=https", "host=sso.tld", "username=", "password="]),
            .fill(["protocol=https", "host=sso.tld"], answer: ["protocol=https", "host=sso.tld", "username=", "password="],
                  prompts: []),
        ]),
    ]
}

/// git with git-credential-libsecret as its only credential helper, a Secret Service setup
/// (private bus, keychaind, bridge) under it, and an askpass that answers what git would
/// otherwise ask a person, writing each question to standard error as git's tests' does.
final class GitWithLibsecret: @unchecked Sendable {
    let setup: SecretServiceSetup
    let helper: String
    private let askpass: String

    init(config: String = "") throws {
        helper = try LibsecretGitHelper.executable.get()
        setup = try SecretServiceSetup(config: config)
        askpass = setup.daemon.root + "/askpass"
        let script = """
            #!/bin/sh
            echo "askpass: $1" >&2
            case "$1" in Username*) echo askpass-username ;; *) echo askpass-password ;; esac

            """
        FileManager.default.createFile(atPath: askpass, contents: Data(script.utf8), attributes: [.posixPermissions: 0o755])
    }

    /// `git credential <action>` with `lines` (and the blank line that ends them) on its input.
    func run(_ action: String, _ lines: [String], config: [String] = []) throws -> CLIResult {
        let options = (["credential.helper=" + helper] + config).flatMap { ["-c", $0] }
        var environment = setup.environment
        environment["GIT_ASKPASS"] = askpass
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        environment["GIT_TERMINAL_PROMPT"] = "0"
        return try runExecutable("/usr/bin/git", options + ["credential", action], environment: environment,
                                 input: Array((lines.joined(separator: "\n") + "\n\n").utf8))
    }

    /// approve and reject print nothing, also on standard error (where libsecret's warnings go).
    func expectQuiet(_ result: CLIResult, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(result.status == 0 && result.stdout.isEmpty && result.stderr.isEmpty,
                "exit \(result.status): \(result.stderr)", sourceLocation: sourceLocation)
    }

    /// `keychain list --json`: every item, as keychaind holds it.
    func keychainItems() throws -> [[String: Any]] {
        let listed = try setup.daemon.cli(["list", "--json"])
        guard listed.status == 0, let items = try JSONSerialization.jsonObject(with: Data(listed.stdout)) as? [[String: Any]] else {
            throw KeychainError(.io, "keychain list exited \(listed.status): \(listed.stderr)")
        }
        return items
    }
}

/// scripts/build-git-credential-libsecret, run once per test process (it caches the build by
/// source hash under .build/clients).
enum LibsecretGitHelper {
    static let executable: Result<String, KeychainError> = {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../scripts/build-git-credential-libsecret").standardized.path
        do {
            let built = try runExecutable(script, [], environment: ProcessInfo.processInfo.environment, input: [])
            let path = built.text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard built.status == 0, FileManager.default.isExecutableFile(atPath: path) else {
                return .failure(KeychainError(.io, "building git-credential-libsecret failed: \(built.stderr)"))
            }
            return .success(path)
        } catch {
            return .failure(KeychainError(.io, "cannot run \(script): \(error)"))
        }
    }()
}

extension CLIResult {
    var lines: [String] { text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init) }
    /// Standard error's lines, trailing blanks trimmed (askpass prompts end in a space).
    var stderrLines: [String] {
        stderr.split(separator: "\n").map { String($0.reversed().drop { $0 == " " }.reversed()) }
    }
}
