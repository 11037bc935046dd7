import Foundation
import KeychainModel
import Testing

/// Two real users, each with a session bus and a bridge of their own, in front of one system
/// keychaind that gives every user a private group (design §6, "two uids"). Runs as root, as
/// CI does, to create the users.
@Suite("Secret Service: two users", .serialized)
struct SecretServiceMultiUserTests {
    @Test func eachUsersBridgeShowsOnlyThatUsersItems() throws {
        let (a, b) = (try MultiUserTests.user("kcapp-a"), try MultiUserTests.user("kcapp-b"))
        let daemon = try RunningDaemon(config: """
            socket_mode = "0666"
            admin_uids = [0]
            unknown_callers = "private-group"
            """)
        let (busA, busB) = (try PrivateSystemBus(), try PrivateSystemBus())
        func environment(_ bus: PrivateSystemBus) -> [String: String] {
            ["DBUS_SESSION_BUS_ADDRESS": bus.address, "KEYCHAIN_SOCKET": daemon.socketPath, "PATH": "/usr/bin:/bin", "HOME": "/"]
        }
        let bridgeA = try RunningBridge(daemon: daemon, arguments: ["--no-portal"], environment: environment(busA), asUser: a)
        let bridgeB = try RunningBridge(daemon: daemon, arguments: ["--no-portal"], environment: environment(busB), asUser: b)
        func python(_ arguments: [String], on bus: PrivateSystemBus, as uid: UInt32) throws -> [String: Any] {
            var result = CLIResult(status: -1, stdout: [], stderr: "")
            // The bridge owns its name a moment after it starts.
            try waitUntil(timeout: 20, "items.py as uid \(uid)") {
                result = try runExecutable("/usr/bin/python3", [SecretServiceScripts.path("items.py")] + arguments,
                                           environment: environment(bus), input: [], asUser: uid)
                return result.status == 0 || !result.stderr.contains("ServiceUnknown")
            }
            guard result.status == 0, let object = try? JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any] else {
                throw KeychainError(.io, "items.py \(arguments) as uid \(uid): \(result.stderr) \(bridgeA.log) \(bridgeB.log)")
            }
            return object
        }
        let path = try #require(try python(["create", "login", "A"], on: busA, as: a)["path"] as? String)
        let byA = try python(["probe", path, "A"], on: busA, as: a)
        #expect(byA["search"] as? [String] == [path])
        #expect(byA["secret"] as? String == "ok")
        let byB = try python(["probe", path, "A"], on: busB, as: b)
        #expect(byB["search"] as? [String] == [])
        #expect(byB["secret"] as? String == "org.freedesktop.Secret.Error.NoSuchObject")
        // A keychain item of A's, which B's keychain CLI does not list either.
        #expect(try daemon.cli(["list"], asUser: a).text.contains("secret-service:login"))
        #expect(!(try daemon.cli(["list"], asUser: b).text.contains("secret-service:login")))
    }
}

extension SecretServiceMultiUserTests {
    /// The attack on op 47: user B's bridge holds a change subscription on the same keychaind
    /// while user A stores an item; A's bus sees ItemCreated, B's bus nothing at all.
    @Test func anotherUsersBridgeIsNotToldOfAUsersNewItem() throws {
        let (a, b) = (try MultiUserTests.user("kcapp-a"), try MultiUserTests.user("kcapp-b"))
        let daemon = try RunningDaemon(config: """
            socket_mode = "0666"
            admin_uids = [0]
            unknown_callers = "private-group"
            """)
        let (busA, busB) = (try PrivateSystemBus(), try PrivateSystemBus())
        func environment(_ bus: PrivateSystemBus) -> [String: String] {
            ["DBUS_SESSION_BUS_ADDRESS": bus.address, "KEYCHAIN_SOCKET": daemon.socketPath, "PATH": "/usr/bin:/bin", "HOME": "/"]
        }
        let bridgeA = try RunningBridge(daemon: daemon, arguments: ["--no-portal"], environment: environment(busA), asUser: a)
        let bridgeB = try RunningBridge(daemon: daemon, arguments: ["--no-portal"], environment: environment(busB), asUser: b)
        for (bus, bridge) in [(busA, bridgeA), (busB, bridgeB)] {
            try waitUntil(timeout: 20, "a bridge to own its name") {
                guard bridge.isRunning else { throw KeychainError(.serviceNotAvailable, "a bridge exited: \(bridge.log)") }
                return (try? runExecutable("/usr/bin/dbus-send", ["--session", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                                                                 "org.freedesktop.DBus.NameHasOwner", "string:org.freedesktop.secrets"],
                                           environment: environment(bus), input: []).text.contains("boolean true")) == true
            }
        }
        func monitor(_ bus: PrivateSystemBus) throws -> (Process, Pipe) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = [SecretServiceScripts.path("changes.py"), "6", "2"]
            process.environment = environment(bus)
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            #expect(output.fileHandleForReading.readData(ofLength: 6) == Data("ready\n".utf8))
            return (process, output)
        }
        let (watchA, outA) = try monitor(busA)
        let (watchB, outB) = try monitor(busB)
        let added = try daemon.cli(["add", "--service", "secret-service:login", "--account", "a-only"], input: bytes("a's secret"), asUser: a)
        #expect(added.status == 0, "\(added.stderr)")
        let seenA = String(decoding: outA.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let seenB = String(decoding: outB.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        watchA.waitUntilExit()
        watchB.waitUntilExit()
        #expect(seenA.contains("org.freedesktop.Secret.Collection.ItemCreated"), "\(seenA) \(bridgeA.log)")
        #expect(seenB.isEmpty, "user B's bus saw: \(seenB)")
    }
}
