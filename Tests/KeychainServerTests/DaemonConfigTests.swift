import Foundation
import KeychainCrypto
import KeychainModel
import Testing
@testable import KeychainServer

@Suite("The config file")
struct DaemonConfigTests {
    @Test func shippedDefaultConfigParsesToTheBuiltInDefaults() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Config/keychaind.toml").standardized
        let text = try String(contentsOf: url, encoding: .utf8)
        #expect(try DaemonConfig.parse(text) == DaemonConfig())
    }

    @Test func everyKeyIsRead() throws {
        let config = try DaemonConfig.parse("""
            state_dir = "/srv/kc"   # trailing comment
            socket = "/run/kc.sock"
            socket_mode = "0660"
            idle_timeout_seconds = 30
            frame_timeout_seconds = 2
            max_connections = 1_000
            busy_poll_microseconds = 0
            argon2_ops = 3
            argon2_memory_mib = 64
            admin_uids = [0, 1000]
            log_level = "debug"
            """)
        #expect(config.stateDirectory == "/srv/kc")
        #expect(config.socketPath == "/run/kc.sock")
        #expect(config.socketMode == 0o660)
        #expect(config.idleTimeoutSeconds == 30)
        #expect(config.frameTimeoutSeconds == 2)
        #expect(config.maxConnections == 1000)
        #expect(config.busyPollMicroseconds == 0)
        #expect(config.argon2 == Argon2Parameters(opsLimit: 3, memLimitBytes: 64 << 20))
        #expect(config.adminUIDs == [0, 1000])
        #expect(config.logLevel == "debug")
    }

    @Test func theBridgeAndPortalListsAreReadAndDefaultToThePackagedPrograms() throws {
        let config = try DaemonConfig.parse("""
            bridge_executables = ["/opt/kc/keychain-secret-service"]
            portal_executables = []
            """)
        let policy = config.accessPolicy(source: "test")
        #expect(policy.bridgeExecutables == ["/opt/kc/keychain-secret-service"])
        #expect(policy.portalExecutables.isEmpty)
        let defaults = DaemonConfig().accessPolicy(source: "test")
        #expect(defaults.bridgeExecutables.contains("/usr/bin/keychain-secret-service"))
        #expect(defaults.portalExecutables == ["/usr/libexec/xdg-desktop-portal"])
    }

    @Test(arguments: [
        ("bridge_executables = [\"relative/bridge\"]", 1, "absolute paths"),
        ("portal_executables = \"/usr/libexec/xdg-desktop-portal\"", 1, "array of absolute paths"),
        ("[[app]]\nid = \"x\"\nuids = [0]\ngroups = [\"mine\", \"portal.org.example.App\"]", 4, "reserved"),
    ])
    func secretServiceSettingsAreChecked(text: String, line: Int, message: String) {
        do {
            _ = try DaemonConfig.parse(text)
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.line == line)
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test(arguments: [
        ("bogus = 1", 1, "unknown key bogus"),
        ("\n\nsocket = 5", 3, "must be a string"),
        ("max_connections = 0", 1, "integer in"),
        ("log_level = \"loud\"", 1, "log_level must be"),
        ("socket_mode = \"999\"", 1, "octal"),
        ("socket = \"a\"\nsocket = \"b\"", 2, "set twice"),
        ("just words", 1, "key = value"),
        ("socket = \"unterminated", 1, "unterminated"),
        ("admin_uids = [-1]", 1, "non-negative"),
    ])
    func badLinesAreRefusedWithTheirLineNumber(text: String, line: Int, message: String) {
        do {
            _ = try DaemonConfig.parse(text)
            Issue.record("\(text) was accepted")
        } catch {
            #expect(error.line == line)
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test func arraysMaySpanLinesWithCommentsAndATrailingComma() throws {
        let config = try DaemonConfig.parse("""
            admin_uids = [
                0,     # root
                1000,  # the operator
            ]
            """)
        #expect(config.adminUIDs == [0, 1000])
    }

    @Test func literalStringsAreReadAsWritten() throws {
        let config = try DaemonConfig.parse(#"""
            socket = '/run/kc\new.sock'
            audit_log = '''/var/log/"audit".jsonl'''
            """#)
        #expect(config.socketPath == #"/run/kc\new.sock"#)
        #expect(config.auditLogPath == #"/var/log/"audit".jsonl"#)
    }

    @Test func escapesInBasicStringsAreDecoded() throws {
        let config = try DaemonConfig.parse(#"state_dir = "/srv/\"kc\"/caf\u00E9\U0001F511\t\\x""#)
        #expect(config.stateDirectory == "/srv/\"kc\"/café🔑\t\\x")
    }

    @Test func aCommaOrHashInsideAStringIsPartOfIt() throws {
        let config = try DaemonConfig.parse("""
            socket = "/run/a,b#c.sock"  # the comment starts here
            [[app]]
            id = "a"
            uids = [1]
            groups = ["team,ops", "shared#1"]
            """)
        #expect(config.socketPath == "/run/a,b#c.sock")
        #expect(config.applications[0].groups == ["team,ops", "shared#1"])
    }

    /// What a TOML formatter (taplo, for one) makes of the example: aligned `=`, indented tables,
    /// arrays spread over lines, CRLF line ends, quoted keys.
    @Test func aFormatterStyleFileParsesLikeThePlainOne() throws {
        let formatted = [
            "socket          = \"/run/keychaind/keychaind.sock\"",
            "\"socket_mode\"   = \"0666\"",
            "unknown_callers = 'refuse'",
            "admin_uids      = [ 0 ]",
            "",
            "[[ app ]]",
            "  id     = \"com.example.web\"",
            "  uids   = [ 1_001 ]",
            "  groups = [",
            "    \"com.example.web\",",
            "    \"com.example.shared\",",
            "  ]",
            "",
            "[[app]]",
            "  id          = \"com.example.worker\"",
            "  uids        = [ 1002 ]",
            "  executables = [ \"/usr/local/bin/worker\" ]",
            "  groups      = [ \"com.example.worker\", \"com.example.shared\" ]",
        ].joined(separator: "\r\n")
        let plain = try DaemonConfig.parse("""
            socket = "/run/keychaind/keychaind.sock"
            socket_mode = "0666"
            unknown_callers = "refuse"
            admin_uids = [0]
            [[app]]
            id = "com.example.web"
            uids = [1001]
            groups = ["com.example.web", "com.example.shared"]
            [[app]]
            id = "com.example.worker"
            uids = [1002]
            executables = ["/usr/local/bin/worker"]
            groups = ["com.example.worker", "com.example.shared"]
            """)
        #expect(try DaemonConfig.parse(formatted) == plain)
        #expect(plain.applications.count == 2)
    }

    @Test func aBadElementOfAMultiLineArrayIsReportedOnItsOwnLine() {
        do {
            _ = try DaemonConfig.parse("admin_uids = [\n  0,\n  -1,\n]")
            Issue.record("a negative uid was accepted")
        } catch {
            #expect(error.line == 3)
            #expect(error.message.contains("non-negative"), "\(error.message)")
        }
    }

    @Test func anErrorInTheTOMLItselfNamesTheColumnToo() {
        do {
            _ = try DaemonConfig.parse("socket_mode = \"0600\"\nsocket = \"/a\" \"/b\"")
            Issue.record("two strings were accepted")
        } catch {
            #expect(error.line == 2)
            #expect(error.column == 15)
            #expect(error.description.hasPrefix("line 2, column 15: "))
        }
    }

    /// A file in a temporary directory, removed with it.
    func withConfigFile(_ bytes: [UInt8], mode: mode_t = 0o600, _ body: (String) throws -> Void) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("config-\(UUID())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/keychaind.toml"
        _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
        chmod(path, mode)
        try body(path)
    }

    @Test func aFileThatIsNotUTF8NamesTheFileLineColumnAndByte() throws {
        try withConfigFile(Array("log_level = \"info\"\n# caf".utf8) + [0xE9] + Array("\n".utf8)) { path in
            let error = #expect(throws: KeychainError.self) { try DaemonConfig.load(path: path) }
            #expect(error?.status == .param)
            #expect(error?.message == "\(path): line 2, column 6: invalid UTF-8 (byte 0xE9): the file must be UTF-8")
        }
    }

    @Test func aFileThatCannotBeReadSaysWhy() throws {
        let missing = "/nonexistent-\(getpid())/keychaind.toml"
        let error = #expect(throws: KeychainError.self) { try DaemonConfig.load(path: missing) }
        #expect(error?.message == "cannot read config file \(missing): No such file or directory")
        try withConfigFile([]) { path in
            let dir = (path as NSString).deletingLastPathComponent
            let error = #expect(throws: KeychainError.self) { try DaemonConfig.load(path: dir) }
            #expect(error?.message == "cannot read config file \(dir): Is a directory")
        }
    }

    @Test func aFileIsReadByteForByte() throws {
        try withConfigFile(Array("log_level = \"debug\"\nstate_dir = \"/srv/caf\u{E9}\"\n".utf8)) { path in
            let config = try DaemonConfig.load(path: path)
            #expect(config.logLevel == "debug")
            #expect(config.stateDirectory == "/srv/caf\u{E9}")
        }
    }

    @Test func flagsWinOverTheFileAndTheFileOverDefaults() throws {
        let config = try DaemonConfig.parse("socket = \"/from/file.sock\"\nstate_dir = \"/from/file\"\nidle_timeout_seconds = 7")
        let server = config.serverConfiguration(stateDirectory: "/from/flag", socket: nil)
        #expect(server.store.stateDirectory == "/from/flag")
        #expect(server.socketPath == "/from/file.sock")
        #expect(server.idleTimeoutMs == 7000)
    }
}

@Suite("Applications in the config")
struct ApplicationConfigTests {
    @Test func theShippedExampleDescribesThreeAppsSharingOneGroup() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../Config/apps-example.toml").standardized
        let config = try DaemonConfig.parse(try String(contentsOf: url, encoding: .utf8))
        #expect(config.applications.map(\.id) == ["com.example.web", "com.example.worker", "com.example.backup"])
        #expect(config.applications.allSatisfy { $0.groups.contains("com.example.shared") })
        #expect(config.applications[1].executables == ["/usr/local/bin/worker"])
        #expect(config.unknownCallers == .refuse)
        #expect(config.auditLogPath == "/var/lib/keychaind/audit.jsonl")
    }

    @Test func usersAreResolvedToUids() throws {
        let config = try DaemonConfig.parse("[[app]]\nid = \"r\"\nusers = [\"root\"]\ngroups = [\"g\"]")
        #expect(config.applications[0].uids == [0])
    }

    @Test(arguments: [
        ("[[app]]\nid = \"a\"\nuids = [1]\ngroups = [\"g\"]\n[[app]]\nid = \"a\"\nuids = [2]\ngroups = [\"h\"]", 5, "used twice"),
        ("[[app]]\nid = \"a\"\nuids = [1]\ngroups = []", 4, "at least one"),
        ("[[app]]\nid = \"a\"\nuids = [1]", 1, "no groups"),
        ("[[app]]\nid = \"a\"\ngroups = [\"g\"]", 1, "no uids"),
        ("[[app]]\nuids = [1]\ngroups = [\"g\"]", 1, "no id"),
        ("[[app]]\nid = \"a\"\nuids = [1]\ngroups = [\"g\"]\ncolour = \"red\"", 5, "unknown key colour"),
        ("[[app]]\nid = \"a\"\nusers = [\"no-such-user-xyz\"]\ngroups = [\"g\"]", 3, "no such user"),
        ("[[app]]\nid = \"a\"\nuids = [1]\nexecutables = [\"bin/x\"]\ngroups = [\"g\"]", 4, "absolute"),
        ("[[app]]\nid = \"a\"\nuids = [1]\ngroups = [\"g\", \"g\"]", 4, "twice"),
        ("[apps]", 1, "unknown section"),
        ("[app]\nid = \"a\"", 1, "[[app]]"),
        ("[[app]]\nid = \"a\"\nuids = [1]\nid = \"b\"", 4, "set twice"),
        ("unknown_callers = \"maybe\"", 1, "refuse"),
    ])
    func badApplicationsAreRefusedWithTheirLine(text: String, line: Int, message: String) {
        do {
            _ = try DaemonConfig.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line, "\(error)")
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test func theFirstMatchingApplicationWinsAndExecutablesNarrowIt() {
        let policy = AccessPolicy(applications: [
            Application(id: "tool", uids: [5], executables: ["/usr/bin/tool"], groups: ["tool"]),
            Application(id: "any", uids: [5], groups: ["any", "shared"]),
        ])
        let tool = Caller(pid: 1, uid: 5, gid: 5, executable: "/usr/bin/tool")
        let other = Caller(pid: 2, uid: 5, gid: 5, executable: "/usr/bin/python3")
        let stranger = Caller(pid: 3, uid: 6, gid: 6, executable: "/usr/bin/tool")
        #expect(policy.scope(for: tool).groups == ["tool"])
        #expect(policy.scope(for: other).groups == ["any", "shared"])
        #expect(policy.scope(for: stranger).groups == [])
        #expect(policy.refusal(for: stranger).contains("uid 6"))
    }

    @Test func privateGroupsForUnknownCallersWhenConfigured() {
        let policy = AccessPolicy(applications: [], unknownCallers: .privateGroup)
        #expect(policy.scope(for: Caller(pid: 1, uid: 42, gid: 42, executable: nil)).groups == ["uid.42"])
    }

    @Test func withoutApplicationsTheDaemonsOwnUidIsTheOwnerApp() {
        let policy = AccessPolicy()
        let me = Caller(pid: 1, uid: getuid(), gid: getgid(), executable: nil)
        #expect(policy.application(for: me)?.id == "owner")
        #expect(policy.scope(for: me).groups == ["uid.\(getuid())"])
    }
}
