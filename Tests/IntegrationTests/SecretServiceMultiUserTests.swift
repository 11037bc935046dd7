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
