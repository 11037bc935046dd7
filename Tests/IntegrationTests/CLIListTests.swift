import Foundation
import KeychainModel
import Testing

/// `keychain list`: what it shows and how it prints what others chose (issues 24 and 25).
@Suite("The keychain CLI's list", .serialized)
struct CLIListTests {
    /// The golden vectors of docs/cli.md, "Escaping": an attribute as stored → as `list`
    /// prints it. C0 and C1 controls and DEL as \xHH, the bidi controls as \u{XXXX}, a
    /// backslash doubled; everything else as it is.
    static let escapingVectors: [(stored: String, printed: String)] = [
        ("plain label", "plain label"),
        ("caf\u{E9} \u{2615} \u{200B}", "caf\u{E9} \u{2615} \u{200B}"),
        ("\u{1B}]0;owned\u{07}", #"\x1B]0;owned\x07"#),
        ("\u{1B}[2J\u{1B}[31mred", #"\x1B[2J\x1B[31mred"#),
        ("row\nforged  row", #"row\x0Aforged  row"#),
        ("cr\rtab\t\u{01}\u{1F}", #"cr\x0Dtab\x09\x01\x1F"#),
        ("del\u{7F}", #"del\x7F"#),
        ("c1\u{80}\u{85}\u{9B}31m\u{9F}", #"c1\x80\x85\x9B31m\x9F"#),
        ("abc\u{202E}fed", #"abc\u{202E}fed"#),
        ("\u{061C}\u{200E}\u{200F}\u{202A}\u{202B}\u{202C}\u{202D}", #"\u{061C}\u{200E}\u{200F}\u{202A}\u{202B}\u{202C}\u{202D}"#),
        ("\u{2066}\u{2067}\u{2068}\u{2069}", #"\u{2066}\u{2067}\u{2068}\u{2069}"#),
        (#"back\x1B"#, #"back\\x1B"#),
    ]

    static func mustBeEscaped(_ v: UInt32) -> Bool {
        v < 0x20 || (0x7F...0x9F).contains(v) || v == 0x061C || (0x200E...0x200F).contains(v)
            || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v)
    }

    @Test func listEscapesControlAndBidiCharactersAsTheGoldenVectorsSay() throws {
        let d = try RunningDaemon()
        for (n, vector) in Self.escapingVectors.enumerated() {
            let service = "vector-\(n)"
            #expect(try d.cli(["add", "--service", service, "--account", vector.stored, "--label", vector.stored], input: bytes("x")).status == Exit.success)
            let r = try d.cli(["list", "--service", service])
            #expect(r.status == Exit.success)
            let lines = r.text.split(separator: "\n", omittingEmptySubsequences: false)
            #expect(lines.count == 3 && lines[2].isEmpty, "vector \(n): one header, one row")
            #expect(lines.count > 1 && lines[1].contains(vector.printed + " "), "vector \(n): \(lines)")
            #expect(!r.text.unicodeScalars.contains { Self.mustBeEscaped($0.value) && $0 != "\n" }, "vector \(n): a raw control")
        }
    }

    /// A key's label and a certificate's are chosen by whoever shares the access group, as an
    /// item's are: `key list` and `cert list` escape them the same way.
    @Test func keyListEscapesTheLabelAsListDoes() throws {
        let d = try RunningDaemon()
        for (n, vector) in Self.escapingVectors.enumerated() where vector.stored != vector.printed {
            let label = "k\(n)-" + vector.stored
            #expect(try d.cli(["key", "generate", "--type", "ed25519", "--label", label]).status == Exit.success, "vector \(n)")
            let r = try d.cli(["key", "list", "--label", label])
            #expect(r.status == Exit.success)
            #expect(r.text.contains("k\(n)-" + vector.printed + "\t"), "vector \(n): \(r.text)")
            #expect(!r.text.unicodeScalars.contains { Self.mustBeEscaped($0.value) && $0 != "\n" && $0 != "\t" }, "vector \(n): a raw control")
        }
    }

    @Test func jsonCarriesTheAttributesAsStored() throws {
        let d = try RunningDaemon()
        let label = "\u{1B}]0;x\u{07}\n\u{202E}"
        _ = try d.cli(["add", "--service", "s", "--account", "a", "--label", label], input: bytes("x"))
        let list = try #require(try JSONSerialization.jsonObject(with: Data(try d.cli(["list", "--json"]).stdout)) as? [[String: Any]])
        #expect(list.first?["labl"] as? String == label)
    }

    @Test func withoutAClassListShowsBothPasswordClassesWithAClassColumn() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--service", "api.example.com", "--account", "alice"], input: bytes("1"))
        _ = try d.cli(["add", "--class", "internet-password", "--server", "git.example.com", "--protocol", "https", "--account", "bob"], input: bytes("2"))
        let r = try d.cli(["list"])
        let lines = r.text.split(separator: "\n")
        #expect(lines.first?.hasPrefix("CLASS") == true)
        #expect(lines.first?.contains("SERVICE/SERVER") == true)
        #expect(lines.contains { $0.hasPrefix("generic-password") && $0.contains("api.example.com") && $0.contains("alice") })
        #expect(lines.contains { $0.hasPrefix("internet-password") && $0.contains("git.example.com") && $0.contains("bob") })
        let json = try #require(try JSONSerialization.jsonObject(with: Data(try d.cli(["list", "--json"]).stdout)) as? [[String: Any]])
        #expect(json.count == 2)
    }

    @Test func theColumnsFollowTheClass() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--service", "api.example.com", "--account", "alice"], input: bytes("1"))
        _ = try d.cli(["add", "--class", "internet-password", "--server", "git.example.com", "--protocol", "https",
                       "--port", "8443", "--path", "/repo.git", "--account", "bob"], input: bytes("2"))
        let internet = try d.cli(["list", "--class", "internet-password"]).text.split(separator: "\n")
        #expect(internet.first?.split(separator: " ").prefix(5) == ["SERVER", "PROTOCOL", "PORT", "PATH", "ACCOUNT"])
        #expect(internet.count == 2)
        #expect(internet.last?.split(separator: " ").prefix(5) == ["git.example.com", "https", "8443", "/repo.git", "bob"])
        let generic = try d.cli(["list", "--class", "generic-password"]).text.split(separator: "\n")
        #expect(generic.first?.hasPrefix("SERVICE ") == true)
        #expect(generic.count == 2 && generic.last?.hasPrefix("api.example.com") == true)
        // --service names a generic password: only that class, with its columns.
        #expect(try d.cli(["list", "--service", "api.example.com"]).text.hasPrefix("SERVICE "))
    }
}
