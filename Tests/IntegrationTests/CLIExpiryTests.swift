import Foundation
import KeychainClient
import KeychainModel
import Testing

/// `--expires` on add and update, and the EXPIRES column of `keychain list` (issue 27).
@Suite("The keychain CLI's expiry", .serialized)
struct CLIExpiryTests {
    let item = ["--service", "api.example.com", "--account", "alice"]

    @Test func aLifetimeIsStoredAsAnExpiryThatListShows() throws {
        let d = try RunningDaemon()
        let before = Date().timeIntervalSince1970
        #expect(try d.cli(["add"] + item + ["--expires", "1h"], input: bytes("token")).status == Exit.success)
        let json = try d.cli(["get", "--json"] + item)
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any]
        let expd = try #require(object?["expd"] as? String)
        let expected = JSONText.iso8601(unix: before + 3_600)
        // The CLI took its own now a moment after `before`.
        #expect(expd >= expected && expd.hasPrefix(String(expected.prefix(13))))
        let list = try d.cli(["list", "--service", "api.example.com"])
        #expect(list.text.split(separator: "\n").first?.hasSuffix("EXPIRES") == true)
        #expect(list.text.contains(expd))
    }

    @Test func aUTCTimeIsStoredAsGiven() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["add"] + item + ["--expires", "2099-12-31T00:00Z"], input: bytes("token")).status == Exit.success)
        #expect(try d.cli(["list"]).text.contains("2099-12-31T00:00:00Z"))
        #expect(try d.cli(["update"] + item + ["--keep-secret", "--expires", "2099-06-30"]).status == Exit.success)
        #expect(try d.cli(["list"]).text.contains("2099-06-30T00:00:00Z"))
    }

    @Test func anItemWithoutExpiryLeavesTheColumnEmpty() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("token"))
        let rows = try d.cli(["list"]).text.split(separator: "\n")
        #expect(rows.count == 2 && !rows[1].hasSuffix(" "))
    }

    @Test func aBadOrPastExpiryIsAUsageErrorAndAddsNothing() throws {
        let d = try RunningDaemon()
        for text in ["tomorrow", "1y", "0h", "-5m", "2026-02-31", "2099-12-31T00:00", "2099-12-31T25:00Z", "2001-01-01T00:00Z"] {
            let r = try d.cli(["add"] + item + ["--expires", text], input: bytes("token"))
            #expect(r.status == Exit.usage, "\(text): \(r.stderr)")
            #expect(r.stderr.contains("--expires"), "\(text)")
        }
        #expect(try d.cli(["get"] + item).status == Exit.notFound)
    }

    /// The sweep runs when keychaind starts (then every 300 s): an item that expired while it
    /// was stopped is deleted, and the log says how many went.
    @Test func theDaemonSweepsExpiredItemsAtStart() throws {
        let d = try RunningDaemon()
        try KeychainConnection(socketPath: d.socketPath).add([
            "class": .string("genp"), "svce": .string("s"), "acct": .string("gone"), "v_Data": .data(bytes("x")),
            "expd": .date(Date().timeIntervalSince1970 - absoluteTimeIntervalSince1970 + 1)])
        _ = try d.cli(["add", "--service", "s", "--account", "kept"], input: bytes("y"))
        usleep(1_100_000)  // past the first item's expiry
        try d.restart()
        var waited = 0
        while !d.log.contains("expiry sweep: 1 expired item(s) deleted") && waited < 300 {
            usleep(100_000)
            waited += 1
        }
        #expect(d.log.contains("expiry sweep: 1 expired item(s) deleted"), "\(d.log)")
        #expect(try d.cli(["get", "--service", "s", "--account", "kept"]).stdout == bytes("y"))
    }
}
