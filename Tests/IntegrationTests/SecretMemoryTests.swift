import Foundation
import KeychainModel
import KeychainProtocol
import Testing

/// Freed memory never holds a secret in clear: a free() hook (Tests/Hooks/freescan.c, built
/// here) is loaded into the real daemon and searches every block it frees for a marker that
/// the secrets, passcodes and passwords of this test contain (docs/security.md, "Memory").
@Suite("No secret left in freed memory", .serialized)
struct SecretMemoryTests {
    static let marker = "FREESCAN-7f3a9c-MARKER"

    /// Builds the hook into `directory`; nil (test skipped) without a C compiler.
    static func buildHook(into directory: String) throws -> String {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Hooks/freescan.c").path
        let library = directory + "/freescan.so"
        let cc = Process()
        cc.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
        cc.arguments = ["-shared", "-fPIC", "-O1", "-o", library, source, "-ldl"]
        try cc.run()
        cc.waitUntilExit()
        guard cc.terminationStatus == 0 else { throw KeychainError(.io, "cc failed to build \(source)") }
        return library
    }

    @Test func theDaemonFreesNoBlockHoldingASecretPasscodeOrPassword() throws {
        var template = Array("/tmp/kcfs.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let report = scratch + "/report"
        let d = try RunningDaemon(environment: [
            "LD_PRELOAD": try Self.buildHook(into: scratch),
            "FREESCAN_MARKER": Self.marker,
            "FREESCAN_REPORT": report,
        ])
        let item = ["--service", "freescan", "--account", "a"]
        let secret = bytes("first secret " + Self.marker + " end")
        let passcode = bytes("pass-" + Self.marker + "\n")
        let password = bytes("backup-" + Self.marker + "\n")
        let steps: [(String, [String], [UInt8])] = [
            ("add", ["add"] + item, secret),
            ("get", ["get"] + item, []),
            ("get --json", ["get", "--json"] + item, []),
            ("update", ["update"] + item, bytes("second secret " + Self.marker)),
            ("list", ["list", "--service", "freescan"], []),
            ("backup", ["backup", "--out", scratch + "/b"], password),
            ("restore", ["restore", scratch + "/b", "--on-conflict", "replace"], password),
            ("get restored", ["get"] + item, []),
            ("passcode set", ["passcode", "set"], passcode),
            ("lock", ["lock"], []),
            ("unlock", ["unlock"], passcode),
            ("passcode change", ["passcode", "change"], passcode + bytes("new-" + Self.marker + "\n")),
            ("passcode remove", ["passcode", "remove"], bytes("new-" + Self.marker + "\n")),
            ("delete", ["delete"] + item, []),
        ]
        for (name, arguments, input) in steps {
            let result = try d.cli(arguments, input: input)
            #expect(result.status == 0, "\(name): \(result.stderr)")
        }
        #expect(d.stop() == 0)
        let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("start ") }, "the hook did not load")
        let hits = lines.filter { $0.hasPrefix("hit ") }
        #expect(hits.isEmpty, "\(hits.count) freed block(s) held the marker: \(hits.prefix(5))")
    }

    /// The application password (op 51) and the secret it seals: given to a context, used to
    /// add, read (right and wrong) and update an item, taken away, and freed with the context
    /// and its connection (issue 29).
    @Test func theDaemonFreesNoBlockHoldingAnApplicationPasswordOrTheSecretItSeals() throws {
        var template = Array("/tmp/kcfs.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let report = scratch + "/report"
        let d = try RunningDaemon(config: "idle_timeout_seconds = 60", environment: [
            "LD_PRELOAD": try Self.buildHook(into: scratch),
            "FREESCAN_MARKER": Self.marker,
            "FREESCAN_REPORT": report,
        ])
        let match: AttributeDictionary = ["class": .string("genp"), "svce": .string("freescan"), "acct": .string("a")]
        do {
            let c = try RawConnection(d)
            let reference = try c.createContext()
            let credRef: AttributeDictionary = ["u_CredRef": .data(reference)]
            let password = SecretBytes(bytes("app-" + Self.marker))
            #expect(try c.send(.contextSetCredential(reference: reference, credential: password)).status == 0)
            let item = match.merging(["accc": .string("ak;2147483648"), "v_Data": .data(bytes("secret " + Self.marker))]) { $1 }
            #expect(try c.send(.add(item.merging(credRef) { $1 })).status == 0)
            let read = match.merging(credRef) { $1 }.merging(["r_Data": .bool(true)]) { $1 }
            #expect(try c.send(.copyMatching(read)).status == 0)
            #expect(try c.send(.update(query: match.merging(credRef) { $1 }, changes: ["v_Data": .data(bytes("new " + Self.marker))])).status == 0)
            #expect(try c.send(.copyMatching(read)).status == 0)
            #expect(try c.send(.contextSetCredential(reference: reference, credential: SecretBytes(bytes("wrong-" + Self.marker)))).status == 0)
            #expect(try c.send(.copyMatching(read)).status == KeychainStatus.authFailed.rawValue)
            #expect(try c.send(.contextSetCredential(reference: reference, credential: password)).status == 0)
            #expect(try c.send(.contextInvalidate(reference: reference)).status == 0)
            let other = try c.createContext()
            #expect(try c.send(.contextSetCredential(reference: other, credential: password)).status == 0)
            c.close()  // the second context goes with its connection
        }
        usleep(200_000)  // the daemon sees the connection close
        #expect(d.stop() == 0)
        let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("start ") }, "the hook did not load")
        let hits = lines.filter { $0.hasPrefix("hit ") }
        #expect(hits.isEmpty, "\(hits.count) freed block(s) held the marker: \(hits.prefix(5))")
    }

    /// The same for the CLI (its dynamically linked twin, since no hook loads into the static
    /// one): the secret it reads and sends, the passcodes and passwords it reads, and the
    /// base64 of the secret it prints with --json.
    @Test func theCLIFreesNoBlockHoldingTheSecretsItReadsSendsOrPrints() throws {
        var template = Array("/tmp/kcfc.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let hook = try Self.buildHook(into: scratch)
        let d = try RunningDaemon()
        let twin = Binaries.directory + "/keychain-dynamic"
        // 24 bytes: its base64 is one run of 32 characters, whatever surrounds it.
        let secret = "SECRET-7f3a9c-FREESCAN24"
        let base64Marker = "U0VDUkVULTdmM2E5Yy1GUkVFU0NBTjI0"
        func hooked(_ marker: String, _ name: String) -> [String: String] {
            ["LD_PRELOAD": hook, "FREESCAN_MARKER": marker, "FREESCAN_REPORT": scratch + "/" + name]
        }
        let item = ["--service", "freescan-cli", "--account", "a"]
        let passcode = bytes("pass-" + secret + "\n")
        let steps: [(String, [String], [UInt8])] = [
            ("add", ["add"] + item, bytes(secret)),
            ("get", ["get"] + item, []),
            ("update", ["update"] + item, bytes(secret + "-2")),
            ("passcode-set", ["passcode", "set"], passcode),
            ("unlock", ["unlock"], passcode),
            ("backup", ["backup", "--out", scratch + "/b"], bytes("pw-" + secret + "\n")),
            ("restore", ["restore", scratch + "/b", "--on-conflict", "replace"], bytes("pw-" + secret + "\n")),
            ("passcode-remove", ["passcode", "remove"], passcode),
        ]
        var reports: [String] = []
        for (name, arguments, input) in steps {
            let result = try d.cli(arguments, input: input, executable: twin, environment: hooked(secret, name))
            #expect(result.status == 0, "\(name): \(result.stderr)")
            reports.append(name)
        }
        #expect(try d.cli(["update"] + item, input: bytes(secret)).status == 0)  // back to the 24-byte secret
        let json = try d.cli(["get", "--json"] + item, executable: twin, environment: hooked(base64Marker, "json"))
        #expect(json.text.contains(base64Marker))
        reports.append("json")
        for name in reports {
            let lines = try String(contentsOfFile: scratch + "/" + name, encoding: .utf8).split(separator: "\n")
            #expect(lines.contains { $0.hasPrefix("start ") }, "\(name): the hook did not load")
            let hits = lines.filter { $0.hasPrefix("hit ") }
            #expect(hits.isEmpty, "\(name): \(hits.count) freed block(s) held the secret")
        }
    }
}
