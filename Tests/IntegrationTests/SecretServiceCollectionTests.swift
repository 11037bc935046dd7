import Foundation
import KeychainModel
import Testing

/// Collections clients create (CreateCollection, SetAlias, Collection.Delete), kept in keychaind
/// (docs/secret-service.md, "Created collections"), through the real bridge and keychaind with
/// python3-secretstorage and secret-tool; and the bridge's read cache.
@Suite("Secret Service: created collections")
struct SecretServiceCollectionTests {
    static let login = "/org/freedesktop/secrets/collection/login"

    @Test func secretstorageCreatesListsStoresSearchesRelabelsAndDeletesACollection() throws {
        let setup = try SecretServiceSetup()
        let result = try setup.pythonJSON("created_collections.py", ["lifecycle"])
        let path = try #require(result["path"] as? String)
        // The collection's items went with it; login's stayed.
        let list = try setup.daemon.cli(["list"]).text
        #expect(!list.contains("secret-service:c") && !list.contains("Work"), "\(list)")
        #expect(list.contains("secret-service:login") && list.contains("in login"), "\(list)")
        #expect(!path.isEmpty)
    }

    @Test func aCollectionAndItsItemsOutliveTheBridgeAndKeychaind() throws {
        let setup = try SecretServiceSetup()
        let path = try #require(try setup.pythonJSON("created_collections.py", ["create", "Kept"])["path"] as? String)
        let item = try #require(try setup.pythonJSON("created_collections.py", ["store", path, "kept"])["path"] as? String)
        setup.daemon.stop()
        #expect(try setup.bridge.exitStatus() == 1)
        try setup.daemon.start()
        _ = try setup.startedBridge()
        let seen = try setup.pythonJSON("created_collections.py", ["probe", path, "kept"])
        #expect(seen["listed"] as? Bool == true)
        #expect(seen["label"] as? String == "Kept")
        #expect(seen["search"] as? [String] == [item])
        #expect(seen["everywhere"] as? [String] == [item])
        // Keychain items like any other: the record (its label) and the item in its collection.
        let list = try setup.daemon.cli(["list"]).text
        #expect(list.contains("secret-service:collections") && list.contains("Kept"), "\(list)")
        #expect(list.contains("secret-service:" + (path.split(separator: "/").last.map(String.init) ?? "?")), "\(list)")
    }

    /// A restore gives every item a new persistent id: the collection's id must not be one.
    @Test func aCollectionAndItsItemsComeBackFromABackupRestoredOnAnotherKeychain() throws {
        let first = try SecretServiceSetup()
        let path = try #require(try first.pythonJSON("created_collections.py", ["create", "Carried", "carried"])["path"] as? String)
        _ = try first.pythonJSON("created_collections.py", ["store", path, "carried"])
        let file = first.daemon.root + "/backup.kcb"
        let password = bytes("correct horse battery")
        #expect(try first.daemon.cli(["backup", "--out", file], input: password + [10]).status == 0)
        let second = try SecretServiceSetup()
        #expect(try second.daemon.cli(["restore", file], input: password + [10]).status == 0)
        let seen = try second.pythonJSON("created_collections.py", ["probe", path, "carried"])
        #expect(seen["listed"] as? Bool == true && seen["label"] as? String == "Carried", "\(seen)")
        #expect((seen["search"] as? [String])?.count == 1, "\(seen)")
        #expect(try second.pythonJSON("created_collections.py", ["create", "Again", "carried"])["path"] as? String == path)
    }

    @Test func setAliasRepointsDefaultPersistentlyAndSlashClearsIt() throws {
        let setup = try SecretServiceSetup()
        let path = try #require(try setup.pythonJSON("created_collections.py", ["create", "Work"])["path"] as? String)
        _ = try setup.pythonJSON("created_collections.py", ["set-alias", "default", path])
        #expect(try setup.pythonJSON("created_collections.py", ["probe", path, "x"])["default"] as? String == path)
        // secret-tool stores into the default collection: now this one.
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Via default", "owner", "tool"],
                                       environment: setup.environment, input: bytes("t"))
        #expect(stored.status == 0, "\(stored.stderr)")
        let inWork = try setup.pythonJSON("created_collections.py", ["probe", path, "tool"])
        #expect((inWork["search"] as? [String])?.count == 1, "\(inWork)")
        // Persisted: a new bridge reads it back.
        _ = try setup.startedBridge(["--replace"])
        #expect(try setup.bridges[0].exitStatus() == 0)
        #expect(try setup.pythonJSON("created_collections.py", ["probe", path, "x"])["default"] as? String == path)
        _ = try setup.pythonJSON("created_collections.py", ["set-alias", "default", "/"])
        #expect(try setup.pythonJSON("created_collections.py", ["probe", path, "x"])["default"] as? String == Self.login)
    }

    @Test func createCollectionWithAnAliasThatExistsReturnsItsCollection() throws {
        let setup = try SecretServiceSetup()
        let first = try #require(try setup.pythonJSON("created_collections.py", ["create", "One", "work"])["path"] as? String)
        let again = try setup.pythonJSON("created_collections.py", ["create", "Two", "work"])["path"] as? String
        #expect(again == first)
        #expect(try setup.pythonJSON("created_collections.py", ["create", "Three", "default"])["path"] as? String == Self.login)
        let seen = try setup.pythonJSON("created_collections.py", ["probe", first, "x"])
        #expect(seen["label"] as? String == "One")
    }

    @Test func secretToolStoresIntoACollectionItNames() throws {
        let setup = try SecretServiceSetup()
        let path = try #require(try setup.pythonJSON("created_collections.py", ["create", "Tool"])["path"] as? String)
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--collection", path, "--label", "Named", "owner", "named"],
                                       environment: setup.environment, input: bytes("in tool"))
        #expect(stored.status == 0, "\(stored.stderr)")
        let seen = try setup.pythonJSON("created_collections.py", ["probe", path, "named"])
        #expect((seen["search"] as? [String])?.first?.hasPrefix(path + "/") == true, "\(seen)")
        let lookup = try runExecutable("/usr/bin/secret-tool", ["lookup", "owner", "named"], environment: setup.environment, input: [])
        #expect(lookup.text == "in tool")
    }

    @Test func createAndDeleteAreSignalled() throws {
        let setup = try SecretServiceSetup()
        var path = ""
        let seen = try SecretServiceChangeFeedTests.signals(setup, count: 2, seconds: 10) { () throws in
            path = try #require(try setup.pythonJSON("created_collections.py", ["create", "Signalled"])["path"] as? String)
        }
        #expect(seen.lines.first == "org.freedesktop.Secret.Service.CollectionCreated /org/freedesktop/secrets \(path)", "\(seen.lines)")
        let deleted = try SecretServiceChangeFeedTests.signals(setup, count: 1, seconds: 10) { () throws in
            #expect(try setup.python("created_collections.py", ["delete", path]).status == 0)
        }
        #expect(deleted.lines.first == "org.freedesktop.Secret.Service.CollectionDeleted /org/freedesktop/secrets \(path)", "\(deleted.lines)")
    }

    /// The specification makes Collection.Label read-write; SecretStorage's own suite relabels
    /// the default collection (login) and puts the label back.
    @Test func loginsLabelIsWritableAndOutlivesTheBridge() throws {
        let setup = try SecretServiceSetup()
        #expect(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "x"])["label"] as? String == "Login")
        #expect(try setup.pythonJSON("created_collections.py", ["set-label", Self.login, "My keys"])["error"] is NSNull)
        #expect(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "x"])["label"] as? String == "My keys")
        _ = try setup.startedBridge(["--replace"])
        #expect(try setup.bridges[0].exitStatus() == 0)
        #expect(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "x"])["label"] as? String == "My keys")
        // Set again: the one record is rewritten, not a second one added.
        #expect(try setup.pythonJSON("created_collections.py", ["set-label", Self.login, "Login"])["error"] is NSNull)
        #expect(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "x"])["label"] as? String == "Login")
        let records = try setup.daemon.cli(["list"]).text.components(separatedBy: "secret-service:collections").count - 1
        #expect(records == 1)
    }

    @Test func theSessionCollectionsLabelIsWritableForTheBridgesLifetime() throws {
        let setup = try SecretServiceSetup()
        let session = "/org/freedesktop/secrets/collection/session"
        #expect(try setup.pythonJSON("created_collections.py", ["set-label", session, "Scratch"])["error"] is NSNull)
        #expect(try setup.pythonJSON("created_collections.py", ["probe", session, "x"])["label"] as? String == "Scratch")
    }

    /// One app's relabel of login is its own: kept in its group, not shown to another app.
    @Test func loginsLabelSetByOneAppIsNotAnothersTheConfigSeparates() throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: { a, b in """
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
        #expect(try setup.pythonJSON("created_collections.py", ["set-label", Self.login, "A's login"], interpreter: a)["error"] is NSNull)
        #expect(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "x"], interpreter: a)["label"] as? String == "A's login")
        #expect(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "x"], interpreter: b)["label"] as? String == "Login")
    }

    /// Each created collection costs a keychaind search in every Service.SearchItems of its app.
    @Test func anAppMayCreateAtMost64Collections() throws {
        let setup = try SecretServiceSetup()
        let filled = try setup.pythonJSON("created_collections.py", ["fill", "70"])
        #expect(filled["made"] as? Int == 64)
        #expect(filled["error"] as? String == "org.freedesktop.DBus.Error.LimitsExceeded")
    }

    @Test func aCollectionOfOneAppIsInvisibleToAnotherTheConfigSeparates() throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: { a, b in """
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
        let path = try #require(try setup.pythonJSON("created_collections.py", ["create", "A's"], interpreter: a)["path"] as? String)
        let item = try #require(try setup.pythonJSON("created_collections.py", ["store", path, "A"], interpreter: a)["path"] as? String)
        _ = try setup.pythonJSON("created_collections.py", ["set-alias", "default", path], interpreter: a)
        let byB = try setup.pythonJSON("created_collections.py", ["probe", path, "A"], interpreter: b)
        #expect(byB["listed"] as? Bool == false)
        #expect(byB["label"] as? String == "org.freedesktop.Secret.Error.NoSuchObject")
        #expect(byB["search"] as? String == "org.freedesktop.Secret.Error.NoSuchObject")
        #expect(byB["everywhere"] as? [String] == [])
        #expect(byB["default"] as? String == Self.login)
        // B cannot store into it, relabel it or delete it either.
        #expect(try setup.python("created_collections.py", ["store", path, "B"], interpreter: b).status != 0)
        #expect(try setup.python("created_collections.py", ["delete", path], interpreter: b).status != 0)
        let byA = try setup.pythonJSON("created_collections.py", ["probe", path, "A"], interpreter: a)
        #expect(byA["listed"] as? Bool == true && byA["label"] as? String == "A's")
        #expect(byA["search"] as? [String] == [item] && byA["default"] as? String == path)
    }

    @Test func aCreatedCollectionIsLockedWhenKeychaindIs() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        _ = try setup.startedBridge(["--protection", "ak"])
        #expect(try setup.daemon.cli(["passcode", "set"], input: bytes("1234\n")).status == 0)
        let path = try #require(try setup.pythonJSON("created_collections.py", ["create", "Lockable"])["path"] as? String)
        let item = try #require(try setup.pythonJSON("created_collections.py", ["store", path, "locks"])["path"] as? String)
        let before = try setup.pythonJSON("created_collections.py", ["locked", path, "locks"])
        #expect(before["collection"] as? Bool == false && before["locked"] as? [String] == [])
        #expect(try setup.daemon.cli(["lock"]).status == 0)
        let after = try setup.pythonJSON("created_collections.py", ["locked", path, "locks"])
        #expect(after["collection"] as? Bool == true)
        #expect(after["locked"] as? [String] == [item])
        #expect(after["secret"] as? String == "org.freedesktop.Secret.Error.IsLocked")
    }

    /// The bridge answers Label from what it read before; a label changed by another keychain
    /// client must still show within the change check's period (a second), not the cache's age.
    @Test func aLabelChangedOutsideTheBridgeIsSeenAtTheNextReadsWithinTheChangeCheck() throws {
        let setup = try SecretServiceSetup()
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Before", "owner", "cached"],
                                       environment: setup.environment, input: bytes("c"))
        #expect(stored.status == 0)
        let path = try #require(try setup.pythonJSON("created_collections.py", ["probe", Self.login, "cached"])["everywhere"] as? [String]).first ?? ""
        let hex = String(path.split(separator: "/").last ?? "")
        let watcher = Process()
        watcher.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        watcher.arguments = [SecretServiceScripts.path("label_watch.py"), path, "After", "8"]
        watcher.environment = setup.environment
        let output = Pipe(), input = Pipe()
        watcher.standardOutput = output
        watcher.standardInput = input
        try watcher.run()
        #expect(output.fileHandleForReading.readData(ofLength: 6) == Data("ready\n".utf8))
        let updated = try setup.daemon.cli(["update", "--keep-secret", "--label", "After", "--service", "secret-service:login", "--account", hex])
        #expect(updated.status == 0, "\(updated.stderr)")
        input.fileHandleForWriting.write(Data("go\n".utf8))
        let text = output.fileHandleForReading.readDataToEndOfFile()
        watcher.waitUntilExit()
        let answer = try JSONSerialization.jsonObject(with: text) as? [String: Any]
        let elapsed = answer?["elapsed"] as? Double, sinceFirstRead = answer?["since_first_read"] as? Double
        #expect(elapsed != nil, "the new label did not show within 8 s")
        // Shown before any entry the watcher's connection filled could lapse (ReadCache.maxAge,
        // 5 s from the fill, which came after the watcher's clock started): the change
        // check emptied the cache. Not a fixed bound from the update, which a busy machine's
        // slow check would break without the cache being wrong.
        if let sinceFirstRead {
            #expect(sinceFirstRead < 5, "the new label showed \(sinceFirstRead) s after the first read (\(elapsed ?? -1) s after the update)")
        }
    }
}
