import Foundation
import KeychainModel
import Testing

@Suite("keychain --synchronizable: synced items from the command line", .serialized)
struct SynchronizableCLITests {
    let item = ["--service", "deploy.example.com", "--account", "ci"]

    @Test func aSynchronizableAddIsFoundByAPlainGetAndListedAsSynced() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["add", "--synchronizable", "--accessible", "after-first-unlock"] + item, input: bytes("tok")).status == Exit.success)
        #expect(try d.cli(["get"] + item).stdout == bytes("tok"))
        #expect(try d.cli(["get", "--synchronizable"] + item).stdout == bytes("tok"))
        #expect(try d.cli(["list"]).text.contains("after-first-unlock (synced)"))
    }

    @Test func theFlagNarrowsASearchToSyncedItems() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("local"))
        #expect(try d.cli(["get", "--synchronizable"] + item).status == Exit.notFound)
        #expect(try d.cli(["delete", "--synchronizable"] + item).status == Exit.notFound)
        #expect(try d.cli(["get"] + item).stdout == bytes("local"))
    }

    @Test func aSyncedAndALocalItemWithOneNameAreTwoItems() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["add"] + item, input: bytes("local"))
        #expect(try d.cli(["add", "--synchronizable"] + item, input: bytes("synced")).status == Exit.success)
        #expect(try d.cli(["get", "--synchronizable"] + item).stdout == bytes("synced"))
        #expect(try d.cli(["update", "--synchronizable"] + item, input: bytes("synced 2")).status == Exit.success)
        #expect(try d.cli(["get", "--synchronizable"] + item).stdout == bytes("synced 2"))
        #expect(try d.cli(["delete"] + item).status == Exit.success)
        #expect(try d.cli(["get"] + item).status == Exit.notFound)
    }

    @Test func aThisDeviceOnlyClassCannotBeSynchronizable() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["add", "--synchronizable", "--accessible", "after-first-unlock-this-device-only"] + item, input: bytes("x"))
        #expect(r.status == Exit.usage)  // errSecParam: the request itself is wrong
        #expect(r.stderr.contains("ThisDeviceOnly items never leave this device"))
        #expect(try d.cli(["get"] + item).status == Exit.notFound)
    }
}
