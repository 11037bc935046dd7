import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Changes made to Secret Service items outside the bridge (another keychain client, a
/// lock) reach D-Bus clients as signals on the login collection, which keychaind pushes to the
/// bridge (op 47; docs/secret-service.md, "Changes made outside the bridge").
@Suite("Secret Service: changes made outside the bridge")
struct SecretServiceChangeFeedTests {
    static let login = "/org/freedesktop/secrets/collection/login"
    static let collectionChanged = "org.freedesktop.Secret.Service.CollectionChanged /org/freedesktop/secrets \(login)"
    static let itemsInvalidated = "org.freedesktop.DBus.Properties.PropertiesChanged \(login) org.freedesktop.Secret.Collection changed= invalidated=Items"

    /// What a monitor connection sees from org.freedesktop.secrets while `action` runs and
    /// until it has seen `count` signals or `seconds` have passed; and how long that took
    /// after the action.
    static func signals(_ setup: SecretServiceSetup, count: Int, seconds: Double,
                        during action: () throws -> Void) throws -> (lines: [String], elapsed: Double) {
        let monitor = Process()
        monitor.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        monitor.arguments = [SecretServiceScripts.path("changes.py"), String(seconds), String(count)]
        monitor.environment = setup.environment
        let output = Pipe()
        monitor.standardOutput = output
        try monitor.run()
        #expect(output.fileHandleForReading.readData(ofLength: 6) == Data("ready\n".utf8))
        try action()
        let start = Date()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        monitor.waitUntilExit()
        return (text.split(separator: "\n").map(String.init), Date().timeIntervalSince(start))
    }

    /// A setup holding one secret-tool item, served by a bridge started after it was stored,
    /// so that the store's own change is behind that bridge's baseline.
    static func setupWithOneItem() throws -> SecretServiceSetup {
        let setup = try SecretServiceSetup()
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Mail", "service", "mail", "user", "alice"],
                                       environment: setup.environment, input: bytes("hunter2"))
        #expect(stored.status == 0)
        _ = try setup.startedBridge(["--replace"])
        #expect(try setup.bridges[0].exitStatus() == 0)
        return setup
    }

    @Test func aKeychainDeleteOfASecretToolItemIsSignalledAsItemDeleted() throws {
        let setup = try Self.setupWithOneItem()
        let seen = try Self.signals(setup, count: 2, seconds: 10) { () throws in
            let deleted = try setup.daemon.cli(["delete", "--service", "secret-service:login"])
            #expect(deleted.status == 0)
        }
        #expect(seen.lines.count == 2 && seen.lines[0].hasPrefix("org.freedesktop.Secret.Collection.ItemDeleted \(Self.login) \(Self.login)/"), "\(seen.lines)")
        #expect(seen.lines.last == Self.itemsInvalidated)
        let lookup = try runExecutable("/usr/bin/secret-tool", ["lookup", "service", "mail", "user", "alice"],
                                       environment: setup.environment, input: [])
        #expect(lookup.status != 0)
    }

    @Test func anItemAddedThroughTheSocketIsSignalledAsItemCreatedWithItsPath() throws {
        let setup = try SecretServiceSetup()
        let seen = try Self.signals(setup, count: 2, seconds: 10) { () throws in
            let added = try setup.daemon.cli(["add", "--service", "secret-service:login", "--account", "cli", "--label", "From the CLI"],
                                             input: bytes("added-on-the-socket"))
            #expect(added.status == 0, "\(added.stderr)")
        }
        #expect(seen.lines.count == 2 && seen.lines[0].hasPrefix("org.freedesktop.Secret.Collection.ItemCreated \(Self.login) \(Self.login)/"), "\(seen.lines)")
        #expect(seen.lines.last == Self.itemsInvalidated)
        // The path signalled is the item's: its label reads as stored.
        let path = String(seen.lines[0].split(separator: " ").last ?? "")
        let label = try setup.pythonJSON("items.py", ["label", path])
        #expect(label["label"] as? String == "From the CLI", "\(label)")
    }

    @Test func theBridgesOwnCreateIsSignalledOnceNotAgainFromKeychaind() throws {
        let setup = try SecretServiceSetup()
        let seen = try Self.signals(setup, count: 3, seconds: 3) { () throws in
            let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Mail", "service", "mail"],
                                           environment: setup.environment, input: bytes("hunter2"))
            #expect(stored.status == 0)
        }
        #expect(seen.lines.count == 2 && seen.lines[0].hasPrefix("org.freedesktop.Secret.Collection.ItemCreated"), "\(seen.lines)")
    }

    @Test func nothingIsSignalledWhileNothingChanges() throws {
        let setup = try Self.setupWithOneItem()
        let seen = try Self.signals(setup, count: 1, seconds: 3.5) {
            // Reads change nothing.
            let lookup = try runExecutable("/usr/bin/secret-tool", ["lookup", "service", "mail", "user", "alice"],
                                           environment: setup.environment, input: [])
            #expect(lookup.status == 0 && lookup.text == "hunter2")
            #expect(try setup.daemon.cli(["status"]).status == 0)
        }
        #expect(seen.lines == [])
    }

    @Test func theGenerationIsForTheBridgeAlone() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        let status = try KeychainConnection(socketPath: setup.daemon.socketPath).status()
        #expect(status["version"] != nil)
        #expect(status["generation"] == nil)
    }

    @Test func theBridgesStatusCallsStayOutOfTheAuditLog() throws {
        let path = "/tmp/kc-audit-feed-\(getpid()).jsonl"
        defer { unlink(path) }
        let setup = try SecretServiceSetup(config: "audit_log = \"\(path)\"")
        Thread.sleep(forTimeInterval: 2.5)
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Mail", "service", "mail"],
                                       environment: setup.environment, input: bytes("hunter2"))
        #expect(stored.status == 0)
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        let bridgesOwn = lines.filter { $0.contains("\"pid\":\(setup.bridge.pid),") && !$0.contains("\"via\"") }
        #expect(bridgesOwn.isEmpty, "\(bridgesOwn)")
        #expect(lines.contains { $0.contains("\"via\":\"secret-service\"") && $0.contains("\"op\":\"attributeAdd\"") }, "\(lines)")
    }

    @Test func aKeychainLockIsSignalledAsLoginsLockedProperty() throws {
        let setup = try SecretServiceSetup()
        #expect(try setup.daemon.cli(["passcode", "set"], input: bytes("1234\n")).status == 0)
        // The passcode's own transaction moves the generation: let the bridge see it first.
        _ = try Self.signals(setup, count: 2, seconds: 5) {}
        let seen = try Self.signals(setup, count: 2, seconds: 10) { () throws in
            let locked = try setup.daemon.cli(["lock"])
            #expect(locked.status == 0)
        }
        #expect(seen.lines == [
            "org.freedesktop.DBus.Properties.PropertiesChanged \(Self.login) org.freedesktop.Secret.Collection changed=Locked invalidated=",
            Self.collectionChanged,
        ])
    }
}
