import Foundation
import KeychainModel
import Testing

/// Secret Service items (design slice 3) through the real bridge and keychaind, driven by the
/// clients people use: secret-tool (libsecret) and python3-secretstorage.
@Suite("Secret Service: items")
struct SecretServiceItemTests {
    @Test func secretToolStoresLooksUpSearchesAndClears() throws {
        let setup = try SecretServiceSetup()
        func tool(_ arguments: [String], input: String = "") throws -> CLIResult {
            try runExecutable("/usr/bin/secret-tool", arguments, environment: setup.environment, input: Array(input.utf8))
        }
        #expect(try tool(["store", "--label", "Mail", "service", "mail", "user", "alice"], input: "first").status == 0)
        let firstSearch = try tool(["search", "--all", "service", "mail"]).text
        #expect(try tool(["store", "--label", "Mail again", "service", "mail", "user", "alice"], input: "second").status == 0)
        let lookup = try tool(["lookup", "service", "mail", "user", "alice"])
        #expect(lookup.status == 0 && lookup.text == "second")
        // Replace kept one item, at the same path.
        let searched = try tool(["search", "--all", "service", "mail"])
        let search = searched.text
        // secret-tool prints the attributes on stderr.
        #expect(searched.stderr.contains("attribute.user = alice"))
        #expect(search.components(separatedBy: "\n[").count == 1 && search.hasPrefix("["), "\(search)")
        #expect(search.split(separator: "\n").first == firstSearch.split(separator: "\n").first)
        #expect(search.contains("label = Mail again") && search.contains("secret = second"))
        #expect(search.contains("schema = org.freedesktop.Secret.Generic"))
        // A keychain item like any other.
        let list = try setup.daemon.cli(["list"])
        #expect(list.text.contains("secret-service:login") && list.text.contains("Mail again"), "\(list.text)")
        #expect(try tool(["clear", "service", "mail"]).status == 0)
        #expect(try tool(["lookup", "service", "mail", "user", "alice"]).status != 0)
        #expect(!(try setup.daemon.cli(["list"]).text.contains("secret-service:login")))
    }

    @Test(arguments: ["dh", "plain"], ["default", "login", "session"])
    func secretstorageCreatesSearchesReadsReplacesEditsAndDeletes(algorithm: String, collection: String) throws {
        let setup = try SecretServiceSetup()
        let result = try setup.pythonJSON("items.py", ["lifecycle", algorithm, collection])
        #expect(result["path"] is String)
    }

    @Test func aSecretToolItemSurvivesABackupRestoredOnAnotherKeychain() throws {
        let first = try SecretServiceSetup()
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Kept", "service", "backup", "user", "bob"],
                                       environment: first.environment, input: bytes("carried over"))
        #expect(stored.status == 0)
        let file = first.daemon.root + "/backup.kcb"
        let password = bytes("correct horse battery")
        #expect(try first.daemon.cli(["backup", "--out", file], input: password + [10]).status == 0)
        let second = try SecretServiceSetup()
        #expect(try second.daemon.cli(["restore", file], input: password + [10]).status == 0)
        let lookup = try runExecutable("/usr/bin/secret-tool", ["lookup", "service", "backup", "user", "bob"],
                                       environment: second.environment, input: [])
        #expect(lookup.status == 0 && lookup.text == "carried over", "\(lookup.stderr)")
    }

    @Test func itemsSurviveABridgeRestart() throws {
        let setup = try SecretServiceSetup()
        let created = try setup.pythonJSON("items.py", ["create", "login", "kept"])
        _ = try setup.startedBridge(["--replace"])
        #expect(try setup.bridge.exitStatus() == 0)
        let seen = try setup.pythonJSON("items.py", ["probe", created["path"] as? String ?? "", "kept"])
        #expect(seen["search"] as? [String] == [created["path"] as? String ?? ""])
        #expect(seen["secret"] as? String == "ok")
    }

    @Test func theBridgeExitsWhenKeychaindGoesAway() throws {
        let setup = try SecretServiceSetup()
        setup.daemon.stop()
        let failed = try setup.python("items.py", ["create", "login", "nobody"])
        #expect(failed.status != 0)
        #expect(try setup.bridge.exitStatus() == 1)
        #expect(setup.bridge.log.contains("keychaind went away"), "\(setup.bridge.log)")
    }

    @Test func aBridgeKeychaindDoesNotAcceptExitsAtStart() throws {
        let setup = try SecretServiceSetup(config: "bridge_executables = []", startBridge: false)
        let bridge = try setup.startedBridge(waitForName: false)
        #expect(try bridge.exitStatus() == 1)
        #expect(bridge.log.contains("asCaller is for the Secret Service bridge"), "\(bridge.log)")
    }

    @Test func aBridgeKeychaindStopsAcceptingExits() throws {
        let setup = try SecretServiceSetup()
        var config = try String(contentsOfFile: setup.daemon.configPath, encoding: .utf8)
        config += "bridge_executables = []\n"
        try config.write(toFile: setup.daemon.configPath, atomically: true, encoding: .utf8)
        kill(setup.daemon.pid, SIGHUP)
        try waitUntil(timeout: 10, "keychaind to reload") { setup.daemon.log.contains("reload") }
        _ = try setup.python("items.py", ["create", "login", "late"])
        #expect(try setup.bridge.exitStatus() == 1)
        #expect(setup.bridge.log.contains("keychaind no longer accepts this bridge"), "\(setup.bridge.log)")
    }

    @Test(arguments: ["login", "session"])
    func twoExecutablesTheConfigSeparatesSeeNoneOfEachOthersItems(collection: String) throws {
        let (a, b, setup) = try Self.twoPythons(config: { a, b in """
            [[app]]
            id = "app.a"
            uids = [\(getuid())]
            executables = ["\(a)"]
            groups = ["app.a"]
            [[app]]
            id = "app.b"
            uids = [\(getuid())]
            executables = ["\(b)"]
            groups = ["app.b"]
            """ })
        let created = try setup.pythonJSON("items.py", ["create", collection, "A"], interpreter: a)
        let path = try #require(created["path"] as? String)
        let byB = try setup.pythonJSON("items.py", ["probe", path, "A"], interpreter: b)
        #expect(byB["search"] as? [String] == [])
        #expect(byB["secret"] as? String == "org.freedesktop.Secret.Error.NoSuchObject")
        let byA = try setup.pythonJSON("items.py", ["probe", path, "A"], interpreter: a)
        #expect(byA["search"] as? [String] == [path])
        #expect(byA["secret"] as? String == "ok")
    }

    @Test(arguments: ["login", "session"])
    func withTheDefaultConfigTwoExecutablesShareTheUsersItems(collection: String) throws {
        let (a, b, setup) = try Self.twoPythons(config: { _, _ in "" })
        let created = try setup.pythonJSON("items.py", ["create", collection, "A"], interpreter: a)
        let path = try #require(created["path"] as? String)
        let byB = try setup.pythonJSON("items.py", ["probe", path, "A"], interpreter: b)
        #expect(byB["search"] as? [String] == [path])
        #expect(byB["secret"] as? String == "ok")
    }

    @Test func aMonitorSeesItemCreatedChangedAndDeleted() throws {
        let setup = try SecretServiceSetup()
        let monitor = Process()
        monitor.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        monitor.arguments = [SecretServiceScripts.path("monitor.py")]
        monitor.environment = setup.environment
        let output = Pipe()
        monitor.standardOutput = output
        try monitor.run()
        #expect(output.fileHandleForReading.readData(ofLength: 6) == Data("ready\n".utf8))
        let path = try #require(try setup.pythonJSON("items.py", ["signals"])["path"] as? String)
        let all = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
        monitor.waitUntilExit()
        // The bridge's change check may see these writes too, at its own time: a
        // CollectionChanged and the Items invalidation that follows it
        // (SecretServiceChangeFeedTests). Left out here.
        var lines: [Substring] = []
        var afterCollectionChanged = false
        for line in all {
            defer { afterCollectionChanged = line.hasPrefix("org.freedesktop.Secret.Service.CollectionChanged ") }
            if afterCollectionChanged || line.hasPrefix("org.freedesktop.Secret.Service.CollectionChanged ") { continue }
            lines.append(line)
        }
        let login = "/org/freedesktop/secrets/collection/login"
        let changed = "org.freedesktop.DBus.Properties.PropertiesChanged \(login) org.freedesktop.Secret.Collection"
        #expect(lines == [
            "org.freedesktop.Secret.Collection.ItemCreated \(login) \(path)", "\(changed)",
            "org.freedesktop.Secret.Collection.ItemChanged \(login) \(path)", "\(changed)",
            "org.freedesktop.Secret.Collection.ItemDeleted \(login) \(path)",
        ])
    }

    /// Two copies of Debian's python3 at different paths, and a setup whose config `config`
    /// makes from their paths.
    static func twoPythons(config: (String, String) -> String) throws -> (String, String, SecretServiceSetup) {
        var template = Array("/tmp/kcpy.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        let root = String(cString: p)
        let python = try #require(realpath("/usr/bin/python3", nil).map { p -> String in
            defer { free(p) }
            return String(cString: p)
        })
        let (a, b) = (root + "/a-python3", root + "/b-python3")
        try FileManager.default.copyItem(atPath: python, toPath: a)
        try FileManager.default.copyItem(atPath: python, toPath: b)
        let setup = try SecretServiceSetup(config: config(a, b))
        setup.cleanUp.append(root)
        return (a, b, setup)
    }
}
