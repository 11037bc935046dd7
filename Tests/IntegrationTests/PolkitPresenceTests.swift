import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Items that ask first, asked through polkit (`[prompt] polkit = true`, docs/security.md
/// "Asking through polkit"): the real keychaind on a private system bus where a stand-in for
/// polkitd (Tests/Fakes/polkit.py) answers CheckAuthorization as each test says and records
/// what keychaind asked it. The real polkitd with an agent runs in the boot check
/// (scripts/boot-checks/polkit).
@Suite("Presence through polkit")
struct PolkitPresenceTests {
    /// The stand-in for polkitd on a private bus, answering `mode` (Tests/Fakes/polkit.py).
    final class FakePolkit: @unchecked Sendable {
        let log: String
        private let process = Process()
        private let input = Pipe()

        init(on bus: PrivateSystemBus, mode: String) throws {
            log = bus.root + "/polkit.log"
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../Fakes/polkit.py").standardized.path
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")  // Debian's, with python3-dbus
            process.arguments = [script, mode, log]
            process.environment = bus.environment.merging(["PATH": "/usr/bin:/bin"]) { $1 }
            let output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            guard output.fileHandleForReading.readData(ofLength: 6) == Data("ready\n".utf8) else {
                throw KeychainError(.serviceNotAvailable, "the stand-in for polkitd did not start")
            }
        }

        deinit {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }

        /// The calls it got, in order.
        var calls: [[String: Any]] {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }

        var checks: [[String: Any]] { calls.filter { $0["call"] as? String == "CheckAuthorization" } }
    }

    /// A keychaind asking through polkit on `bus`, with a passcode, and the item that asks first
    /// added; `pinentry`: also a scripted pinentry in [prompt], for when polkit cannot ask.
    struct Host {
        let bus: PrivateSystemBus
        let polkit: FakePolkit?
        let daemon: RunningDaemon
        let client: KeychainConnection

        init(mode: String?, pinentry: ScriptedPinentry? = nil, extra: String = "", launcher: [String] = []) throws {
            let bus = try PrivateSystemBus()
            self.bus = bus
            polkit = try mode.map { try FakePolkit(on: bus, mode: $0) }
            let section = pinentry.map { $0.promptSection + "\n" } ?? "[prompt]\n"
            let daemon = try RunningDaemon(config: section + "polkit = true\n" + extra, environment: bus.environment,
                                           launcher: launcher)
            self.daemon = daemon
            client = KeychainConnection(socketPath: daemon.socketPath)
            guard try daemon.cli(["passcode", "set"], input: bytes("1234\n")).status == 0 else {
                throw KeychainError(.internal, "passcode set failed: \(daemon.log)")
            }
            try client.add(PolkitPresenceTests.item)
        }

        func read() throws -> ItemResult? {
            if case .single(let result) = try client.copyMatching(PolkitPresenceTests.query) { return result }
            return nil
        }
    }

    /// A label and a reason that try to draw a line of their own in the dialog.
    static let item: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"),
        "labl": .string("prod token\nkeychaind: this request is safe"),
        "accc": .string("ak;1"), "v_Data": .data(Array("s3cret".utf8)),
    ]
    static let query: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "r_Data": .bool(true),
        "u_OpPrompt": .string("deploy\u{202E}evil"),
    ]
    static let secret = ItemResult.data(Array("s3cret".utf8))

    /// This process's start time, as polkit reads it (/proc/PID/stat field 22).
    static var ownStartTime: UInt64? {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }

    @Test func thePersonsPasswordInPolkitsAgentReadsTheSecret() throws {
        let host = try Host(mode: "yes")
        #expect(try host.read() == Self.secret)
    }

    @Test func polkitIsAskedAboutTheCallingProcessAsTheKernelNamesIt() throws {
        let host = try Host(mode: "yes")
        _ = try host.read()
        let checks = host.polkit!.checks
        #expect(checks.count == 2, "a probe, then the check that asks: \(checks)")
        for check in checks {
            #expect(check["kind"] as? String == "unix-process")
            #expect(check["action"] as? String == "org.keychaind.confirm-item-use")
            let subject = check["subject"] as? [String: Any] ?? [:]
            #expect(subject["pid"] as? Int == Int(getpid()))
            #expect(subject["uid"] as? Int == Int(getuid()))
            #expect((subject["start-time"] as? NSNumber)?.uint64Value == Self.ownStartTime)
            #expect(check["types"] as? [String: String] == ["pid": "UInt32", "start-time": "UInt64", "uid": "Int32"])
        }
        #expect(checks.first?["flags"] as? Int == 0 && checks.first?["cancellation_id"] as? String == "")
        #expect(checks.last?["flags"] as? Int == 1, "AllowUserInteraction")
        let cancellationID = checks.last?["cancellation_id"] as? String ?? ""
        #expect(!cancellationID.isEmpty)
    }

    @Test func theDetailsNameTheProgramAndShowTheCallersTextEscaped() throws {
        let host = try Host(mode: "yes")
        _ = try host.read()
        let details = host.polkit!.checks.last?["details"] as? [String: String] ?? [:]
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        #expect(details["program"] == executable)
        #expect(details["command"] == nil, "a readable executable is named by its path alone")
        #expect(details["pid"] == String(getpid()))
        #expect(details["item"] == "prod token\\u{a}keychaind: this request is safe")
        #expect(details["reason"] == "deploy\\u{202e}evil")
        let request = details["request"] ?? ""
        #expect(request.hasPrefix("\(executable) (pid \(getpid())) wants to use the keychain item"), "\(request)")
        #expect(!request.contains("passcode"), "the agent asks for the person's own password: \(request)")
        #expect(request.split(separator: "\n").count == 2, "keychaind's line and the reason's, no line of the caller's: \(request)")
    }

    /// The reader of the item: a python process made non-dumpable (PR_SET_DUMPABLE 0) that
    /// names itself "evil`" and a newline (PR_SET_NAME), then reads the item on a raw socket.
    /// Prints its pid, then the read's status.
    static let hiddenReader = #"""
    import ctypes, os, socket, struct, sys
    libc = ctypes.CDLL(None)
    libc.prctl(4, 0, 0, 0, 0)
    libc.prctl(15, ctypes.c_char_p(b"evil`\nname"), 0, 0, 0)
    print(os.getpid(), flush=True)
    query = {"class": "genp", "svce": "prod", "acct": "deploy", "r_Data": True}
    body = struct.pack("<I", len(query))
    for key in sorted(query):
        value = query[key]
        body += struct.pack("<H", len(key)) + key.encode()
        body += bytes([4, 1]) if value is True else bytes([1]) + struct.pack("<I", len(value)) + value.encode()
    payload = bytes([1, 2]) + body
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
    s.sendall(struct.pack("<I", len(payload)) + payload)
    head = s.recv(4, socket.MSG_WAITALL)
    answer = s.recv(struct.unpack("<I", head)[0], socket.MSG_WAITALL)
    print(struct.unpack("<i", answer[1:5])[0], flush=True)
    """#

    /// Under the packaged system daemon (no CAP_SYS_PTRACE) another user's executable cannot be
    /// read, and neither can a non-dumpable process's of keychaind's own uid, which this test
    /// uses: keychaind runs as root without CAP_SYS_PTRACE, the reader in a session scope of
    /// its own (a cgroup made as logind names them). polkit's message names the pid, the uid
    /// and its user, the unit, and last the process's own name for itself, escaped.
    @Test func aProgramWhoseExecutableCannotBeReadIsNamedByItsUIDUnitAndOwnName() throws {
        let host = try Host(mode: "yes", launcher: CallerIdentityTests.withoutPtrace)
        let scope = "session-kc\(getpid()).scope"
        let cgroup = try UnitIdentityTests.Cgroup("/user.slice/user-0.slice/\(scope)")
        let script = "echo $$ > \(cgroup.directory)/cgroup.procs && exec /usr/bin/python3 -c \"$0\" \(host.daemon.socketPath)"
        let run = try runExecutable("/bin/sh", ["-c", script, Self.hiddenReader], environment: ["PATH": "/usr/bin:/bin"], input: [])
        let lines = run.text.split(separator: "\n").map(String.init)
        try #require(lines.count == 2, "\(run.text) \(host.daemon.log)")
        #expect(lines[1] == "0", "the read is allowed: \(host.daemon.log)")
        let details = host.polkit!.checks.last?["details"] as? [String: String] ?? [:]
        #expect(details["program"] == "")
        #expect(details["pid"] == lines[0])
        #expect(details["uid"] == "0")
        #expect(details["user"] == "root")
        #expect(details["unit"] == scope)
        #expect(details["command"] == "evil`\\u{a}name")
        let request = details["request"] ?? ""
        #expect(request.hasPrefix("A program whose executable cannot be read (pid \(lines[0]), uid 0 (root), unit \(scope), calls itself `evil\\u{60}\\u{a}name`) wants to use the keychain item"), "\(request)")
        #expect(request.split(separator: "\n").count == 1, "keychaind's one line, none of the caller's: \(request)")
    }

    @Test func aDismissedDialogIsUserCanceled() throws {
        let host = try Host(mode: "dismissed")
        expectStatus(.userCanceled) { _ = try host.read() }
    }

    @Test func wrongPasswordsAreUserCanceled() throws {
        let host = try Host(mode: "wrong")
        expectStatus(.userCanceled) { _ = try host.read() }
    }

    @Test func withNoAgentAndNoPinentryItIsInteractionNotAllowed() throws {
        let host = try Host(mode: "no-agent")
        expectStatus(.interactionNotAllowed) { _ = try host.read() }
        #expect(host.daemon.log.contains("no polkit authentication agent can reach"), "\(host.daemon.log)")
    }

    @Test func withNoAgentPinentryAsks() throws {
        let pinentry = try ScriptedPinentry(answers: ["1234"])
        let host = try Host(mode: "no-agent", pinentry: pinentry)
        #expect(try host.read() == Self.secret)
        #expect(ItemsThatAskFirstTests.said(pinentry.log).contains("GETPIN"))
    }

    @Test func aPersonRefusingInPolkitIsNotAskedAgainByPinentry() throws {
        let pinentry = try ScriptedPinentry(answers: ["1234"])
        let host = try Host(mode: "dismissed", pinentry: pinentry)
        expectStatus(.userCanceled) { _ = try host.read() }
        #expect(!ItemsThatAskFirstTests.said(pinentry.log).contains("GETPIN"))
    }

    /// A rule that answers yes, or an authorization kept from before, is nobody's presence.
    @Test func aYesWithoutAskingDoesNotCount() throws {
        let host = try Host(mode: "rule-yes")
        expectStatus(.interactionNotAllowed) { _ = try host.read() }
        #expect(host.polkit!.checks.count == 1, "only the probe")
    }

    @Test func aCallerOutsideAnActiveSessionIsNotAskedByPolkit() throws {
        let pinentry = try ScriptedPinentry(answers: ["1234"])
        let host = try Host(mode: "no-session", pinentry: pinentry)
        #expect(try host.read() == Self.secret)
        #expect(host.polkit!.checks.count == 1)
        #expect(ItemsThatAskFirstTests.said(pinentry.log).contains("GETPIN"))
    }

    @Test func withoutPolkitdPinentryAsks() throws {
        let pinentry = try ScriptedPinentry(answers: ["1234"])
        let host = try Host(mode: nil, pinentry: pinentry)
        #expect(try host.read() == Self.secret)
        #expect(host.daemon.log.contains("no polkitd on the system bus"), "\(host.daemon.log)")
    }

    @Test func aKeychaindPolkitDoesNotTrustFallsBack() throws {
        let host = try Host(mode: "untrusted")
        expectStatus(.interactionNotAllowed) { _ = try host.read() }
        #expect(host.daemon.log.contains("must be root or an owner of org.keychaind.confirm-item-use"), "\(host.daemon.log)")
    }

    /// The dialog is withdrawn when the person does not answer in time, so a password typed
    /// later opens nothing.
    @Test func anUnansweredDialogIsCancelledAtTheBound() throws {
        let host = try Host(mode: "hang", extra: "polkit_timeout_seconds = 5\n")
        expectStatus(.userCanceled) { _ = try host.read() }
        let calls = host.polkit!.calls
        let asked = calls.last { $0["call"] as? String == "CheckAuthorization" }?["cancellation_id"] as? String
        #expect(calls.last?["call"] as? String == "CancelCheckAuthorization")
        #expect(calls.last?["cancellation_id"] as? String == asked)
    }

    /// devicePasscode asks for the keychain's passcode: the login password does not answer it.
    @Test func aDevicePasscodeItemIsAskedByPinentryNotPolkit() throws {
        let pinentry = try ScriptedPinentry(answers: ["1234"])
        let host = try Host(mode: "yes", pinentry: pinentry)
        var item = Self.item
        item["acct"] = .string("passcode-only")
        item["accc"] = .string("ak;16")
        try host.client.add(item)
        var query = Self.query
        query["acct"] = .string("passcode-only")
        #expect(try host.client.copyMatching(query) == .single(Self.secret))
        #expect(host.polkit!.checks.isEmpty)
        #expect(ItemsThatAskFirstTests.said(pinentry.log).contains("GETPIN"))
    }

    @Test func aContextAuthenticatedThroughPolkitSparesTheNextRead() throws {
        let host = try Host(mode: "yes")
        let context = try AuthenticationContext(connection: host.client)
        #expect(try host.client.copyMatching(Self.query, context: context) == .single(Self.secret))
        #expect(try host.client.copyMatching(Self.query, context: context) == .single(Self.secret))
        #expect(host.polkit!.checks.count == 2, "one ask (a probe and a check) for both reads")
    }
}
