import Foundation
import KeychainModel
import Testing

/// get, update and delete act only on items the command names; delete says how many it
/// removed; arguments that are not UTF-8 are refused (issue 24).
@Suite("The keychain CLI's item selection", .serialized)
struct CLISelectionTests {
    let item = ["--service", "api.example.com", "--account", "alice"]
    let inet = ["--class", "internet-password", "--server", "git.example.com", "--protocol", "https", "--account", "bob"]

    @Test func getWithoutAnOptionNamingItemsIsAUsageErrorAndPrintsNoSecret() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("SECRET-1"))
        for bare in [["get"], ["get", "--json"], ["get", "--class", "generic-password"], ["get", "--synchronizable"]] {
            let r = try d.cli(bare)
            #expect(r.status == Exit.usage, "\(bare)")
            #expect(!r.text.contains("SECRET-1"), "\(bare)")
            if bare.contains("--json") {
                // With --json an error is the JSON object on standard output alone (docs/cli.md).
                #expect(r.text.hasPrefix("{\"error\":\"errSecParam\"") && r.text.contains("--service") && r.stderr.isEmpty, "\(bare)")
            } else {
                #expect(r.stdout.isEmpty, "\(bare)")
                #expect(r.stderr.contains("--service"), "\(bare)")
            }
        }
    }

    @Test func deleteWithoutAnOptionNamingItemsDeletesNothing() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("kept"))
        for bare in [["delete"], ["delete", "--access-group", "x"], ["delete", "--class", "internet-password"]] {
            let r = try d.cli(bare)
            #expect(r.status == Exit.usage, "\(bare)")
            #expect(r.stderr.contains("--all"), "\(bare)")
        }
        #expect(try d.cli(["get"] + item).stdout == bytes("kept"))
    }

    @Test func updateWithoutAnOptionNamingItemsChangesNothing() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("kept"))
        #expect(try d.cli(["update"], input: bytes("overwritten")).status == Exit.usage)
        #expect(try d.cli(["update", "--keep-secret", "--label", "L"]).status == Exit.usage)
        #expect(try d.cli(["get"] + item).stdout == bytes("kept"))
    }

    @Test func deleteSaysHowManyItemsItRemoved() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add", "--service", "one", "--account", "alice"], input: bytes("1"))
        _ = try d.cli(["add", "--service", "two", "--account", "alice"], input: bytes("2"))
        _ = try d.cli(["add", "--service", "three", "--account", "carol"], input: bytes("3"))
        let r = try d.cli(["delete", "--account", "alice"])
        #expect(r.status == Exit.success)
        #expect(r.text == "deleted 2 items\n")
        let one = try d.cli(["delete", "--json", "--service", "three"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(one.stdout)) as? [String: Any])
        #expect(object["status"] as? Int == 0 && object["deleted"] as? Int == 1)
    }

    @Test func deleteAllDeletesEveryPasswordOfBothClassesAndSaysHowMany() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("1"))
        _ = try d.cli(["add", "--service", "other", "--account", "alice"], input: bytes("2"))
        _ = try d.cli(["add"] + inet, input: bytes("3"))
        let r = try d.cli(["delete", "--all"])
        #expect(r.status == Exit.success)
        #expect(r.text == "deleted 3 items\n")
        #expect(try d.cli(["list", "--json"]).text.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
        #expect(try d.cli(["delete", "--all"]).status == Exit.notFound)
    }

    @Test func deleteAllNarrowedByClassKeepsTheOtherClass() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("kept"))
        _ = try d.cli(["add"] + inet, input: bytes("gone"))
        #expect(try d.cli(["delete", "--all", "--class", "internet-password"]).text == "deleted 1 item\n")
        #expect(try d.cli(["get"] + item).stdout == bytes("kept"))
    }

    @Test func deleteAllWithAnOptionNamingItemsIsRefused() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("kept"))
        let r = try d.cli(["delete", "--all", "--service", "api.example.com"])
        #expect(r.status == Exit.usage)
        #expect(try d.cli(["get"] + item).stdout == bytes("kept"))
    }

    /// Deletes work in every lock state (docs/protocol.md); the matches of a locked class
    /// cannot be listed, so the count is a lower bound and says so.
    @Test func deleteWhileLockedStillDeletesAndSaysTheCountIsALowerBound() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("x"))
        #expect(try d.cli(["passcode", "set"], input: bytes("1234\n")).status == Exit.success)
        #expect(try d.cli(["lock"]).status == Exit.success)
        let r = try d.cli(["delete"] + item)
        #expect(r.status == Exit.success)
        #expect(r.text.hasPrefix("deleted at least 1 item:"))
        #expect(try d.cli(["unlock"], input: bytes("1234\n")).status == Exit.success)
        #expect(try d.cli(["get"] + item).status == Exit.notFound)
    }

    /// Runs the CLI through sh, whose printf makes the bytes no Swift String can carry.
    func cliWithRawArguments(_ d: RunningDaemon, _ script: String) throws -> CLIResult {
        try d.cli(["-c", script, Binaries.keychain], executable: "/bin/sh")
    }

    @Test func anArgumentThatIsNotUTF8IsRefusedNamingItsPositionAndByte() throws {
        let d = try RunningDaemon()
        let r = try cliWithRawArguments(d, #"printf x | exec "$0" add --service "$(printf 'svc\377')" --account a"#)
        #expect(r.status == Exit.usage)
        #expect(r.stderr.contains("argument 3 is not UTF-8 (byte 0xFF at offset 3)"))
        // Two names that differ only in their bad bytes were once the same item (U+FFFD).
        let other = try cliWithRawArguments(d, #"exec "$0" get --service "$(printf 'svc\376')" --account a"#)
        #expect(other.status == Exit.usage)
        #expect(other.stderr.contains("byte 0xFE"))
        #expect(try d.cli(["list", "--json"]).text.trimmingCharacters(in: .whitespacesAndNewlines) == "[]")
    }
}
