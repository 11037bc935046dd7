import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// A hostile local user against the Secret Service bridge and keychaind's asCaller
/// (docs/security.md, "The Secret Service bridge", "Attacks tried"): each test is one family of
/// attempts, made by Tests/SecretServiceScripts/attack.py against the real bus, bridge and
/// keychaind, and the outcome the promises require.
@Suite("Secret Service: attacks from a hostile local user")
struct SecretServiceAttackTests {
    static let accessDenied = "org.freedesktop.DBus.Error.AccessDenied"
    static let noSuchObject = "org.freedesktop.Secret.Error.NoSuchObject"
    static let noSession = "org.freedesktop.Secret.Error.NoSession"
    static let invalidArgs = "org.freedesktop.DBus.Error.InvalidArgs"
    static let limitsExceeded = "org.freedesktop.DBus.Error.LimitsExceeded"

    /// attack.py `victim`: a client that made an item (owner=victim) and stays connected,
    /// holding its session, until `leave()`.
    final class Victim {
        let process = Process()
        let input = Pipe()
        let path: String
        let session: String

        init(_ setup: SecretServiceSetup, collection: String = "login", interpreter: String = "/usr/bin/python3") throws {
            process.executableURL = URL(fileURLWithPath: interpreter)
            process.arguments = [SecretServiceScripts.path("attack.py"), "victim", collection]
            process.environment = setup.environment
            let output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            try process.run()
            let line = output.fileHandleForReading.availableData
            let object = try #require(try? JSONSerialization.jsonObject(with: line) as? [String: String], "victim: \(String(decoding: line, as: UTF8.self))")
            path = try #require(object["path"])
            session = try #require(object["session"])
        }

        func leave() {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }

        deinit { leave() }
    }

    static func attack(_ setup: SecretServiceSetup, _ arguments: [String], interpreter: String = "/usr/bin/python3") throws -> [String: Any] {
        try setup.pythonJSON("attack.py", arguments, interpreter: interpreter)
    }

    /// The bridge's resident memory, in KiB.
    static func residentKiB(_ pid: Int32) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }

    // MARK: another uid

    /// A bus that admits two uids (the test's private bus admits all): the other uid reaches
    /// the victim's bridge and gets AccessDenied for every call, before anything is looked up.
    @Test func anotherUidOnTheSameBusIsRefusedEveryCall() throws {
        let setup = try SecretServiceSetup()
        let victim = try Victim(setup)
        let other = try MultiUserTests.user("kcapp-a")
        let result = try runExecutable("/usr/bin/python3", [SecretServiceScripts.path("attack.py"), "foreign", victim.path, victim.session],
                                       environment: setup.environment, input: [], asUser: other)
        let outcomes = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any], "\(result.stderr)")
        #expect(outcomes.count == 21)
        for (attempt, answer) in outcomes {
            #expect(answer as? String == Self.accessDenied, "\(attempt): \(answer)")
        }
        let check = try Self.attack(setup, ["check", victim.path])
        #expect(check["secret"] as? String == "s3cret" && check["label"] as? String == "victim's label")
    }

    // MARK: one uid, apps the config separates

    @Test(arguments: ["login", "session"])
    func anAppConfinedByExecutableReachesNoneOfAnotherAppsItems(collection: String) throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: Self.separated)
        let victim = try Victim(setup, collection: collection, interpreter: a)
        let outcomes = try Self.attack(setup, ["confined", collection, victim.path], interpreter: b)
        for attempt in ["GetSecret", "Get Label", "Get Attributes", "Get Locked", "GetAll", "Set Label", "Set Attributes", "SetSecret", "Delete"] {
            #expect(outcomes[attempt] as? String == Self.noSuchObject, "\(attempt): \(String(describing: outcomes[attempt]))")
        }
        for attempt in ["GetSecrets", "Service.SearchItems", "login SearchItems", "login Items", "session SearchItems", "session Items"] {
            #expect(outcomes[attempt] as? [String] == [], "\(attempt): \(String(describing: outcomes[attempt]))")
        }
        // CreateItem(replace) with the victim's exact attributes makes B's own item.
        let planted = try #require(outcomes["CreateItem replace"] as? String)
        #expect(planted.hasPrefix("/org/freedesktop/secrets/collection/\(collection)/") && planted != victim.path)
        let check = try Self.attack(setup, ["check", victim.path], interpreter: a)
        #expect(check["secret"] as? String == "s3cret" && check["label"] as? String == "victim's label", "\(check)")
    }

    static func separated(_ a: String, _ b: String) -> String {
        """
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
        """
    }

    /// A program that connects, makes an item, then execs another program that keeps the
    /// connection: the connection no longer speaks for anyone (the bridge checks on every call
    /// that its process runs the executable it first saw).
    @Test(arguments: ["login", "session"])
    func aProgramThatExecsAnotherLosesTheFirstOnesItemsWithIt(collection: String) throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: Self.separated)
        let outcomes = try Self.attack(setup, ["execfirst", collection, b], interpreter: a)
        #expect(outcomes["before"] as? String == "s3cret")
        #expect(outcomes["after"] as? String == Self.accessDenied, "\(outcomes)")
    }

    /// The bridge's read cache against the same attack: app A reads its item's properties and
    /// its collections (which the bridge keeps for a few seconds), then execs a program the
    /// config names for no app, which asks again at once on the inherited connection. It is
    /// refused (AccessDenied), never given A's label, attributes or collection.
    @Test(arguments: ["login", "session"])
    func aProgramThatExecsAnotherGetsNoneOfTheFirstOnesCachedProperties(collection: String) throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons { a, _ in
            "[[app]]\nid = \"app.a\"\nuids = [\(getuid())]\nexecutables = [\"\(a)\"]\ngroups = [\"app.a\"]\n"
        }
        let outcomes = try Self.attack(setup, ["execread", collection, b], interpreter: a)
        let before = try #require(outcomes["before"] as? [String: Any], "\(outcomes)")
        let after = try #require(outcomes["after"] as? [String: Any], "\(outcomes)")
        let stranger = try #require(outcomes["stranger"] as? [String: Any], "\(outcomes)")
        // What A was answered, so that the cache held it when the next program asked.
        #expect(before["Get Label"] as? String == "victim's label", "\(before)")
        #expect((before["Collections"] as? [String])?.count == 3, "\(before)")
        // The new program is refused outright: the bridge saw A's executable first. (On a
        // connection of its own it is answered as itself: `stranger`.)
        for reading in ["Get Label", "Get Attributes", "GetAll", "Collections"] {
            #expect(after[reading] as? String == Self.accessDenied, "\(reading): \(outcomes)")
        }
        #expect(!"\(stranger)".contains("victim"), "\(stranger)")
        #expect(!"\(after)".contains("victim"), "\(after)")
    }

    /// Issue 28's attack: app A connects, forks a child that keeps the connection, and execs
    /// the victim's program itself, so that the pid the bus gives for the connection runs the
    /// victim's executable. The child is refused everything: the bridge took the connection's
    /// executable before (at its first call, or as it joined the bus) and checks it on every call.
    @Test(arguments: ["called", "silent"])
    func aConnectionWhoseOpenerExecsAnotherAppsProgramIsRefused(mode: String) throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: Self.separated)
        let victim = try Victim(setup, interpreter: b)
        let outcomes = try Self.attack(setup, ["forkexec", victim.path, b, mode, setup.bridge.logPath], interpreter: a)
        for attempt in ["OpenSession", "SearchItems", "GetSecret", "Get Label"] {
            #expect(outcomes[attempt] as? String == Self.accessDenied, "\(attempt): \(outcomes)")
        }
        #expect(setup.bridge.log.contains("runs another executable than when the bridge first saw it"), "\(setup.bridge.log)")
        let check = try Self.attack(setup, ["check", victim.path], interpreter: b)
        #expect(check["secret"] as? String == "s3cret", "\(check)")
    }

    /// The limit docs/security.md names: the bus credits a connection to the process that
    /// opened it, so another program handed the connection speaks as that process while it
    /// lives, and for nobody once it has exited.
    @Test func aConnectionHandedToAnotherProgramSpeaksForItsOpenerOnlyWhileTheOpenerLives() throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: Self.separated)
        let outcomes = try Self.attack(setup, ["passfirst", "login", b], interpreter: a)
        #expect(outcomes["before"] as? String == "s3cret")
        #expect(outcomes["while the opener lives"] as? String == "s3cret", "\(outcomes)")
        #expect(outcomes["after it exits"] as? String == Self.accessDenied, "\(outcomes)")
    }

    // MARK: sessions and prompts of others

    @Test func aSessionOfAnotherConnectionIsNoSessionWhileItsOwnerStaysAndAfterItLeaves() throws {
        let setup = try SecretServiceSetup()
        let victim = try Victim(setup)
        let during = try Self.attack(setup, ["hijack", victim.path, victim.session])
        #expect(during.count == 4 && during.values.allSatisfy { $0 as? String == Self.noSession }, "\(during)")
        victim.leave()
        let after = try Self.attack(setup, ["hijack", victim.path, victim.session])
        #expect(after.count == 4 && after.values.allSatisfy { $0 as? String == Self.noSession }, "\(after)")
    }

    @Test func oneConnectionHoldsSixteenSessionsAndOthersStillOpenTheirs() throws {
        let outcomes = try Self.attack(try SecretServiceSetup(), ["sessions"])
        #expect(outcomes["first 16"] as? [String] == ["ok"])
        #expect(outcomes["17th"] as? String == Self.limitsExceeded)
        #expect(outcomes["another connection"] as? String == "ok")
    }

    /// Unlock prompts whose pinentry never answers: per connection, in all, and pinentry
    /// dialogs at once are bounded; another connection's prompt cannot be shown or dismissed.
    @Test func promptsAreBoundedAndOnlyTheirOwnerMayShowOrDismissThem() throws {
        let pinentry = "/tmp/kc-silent-pinentry-\(getpid())"
        try "#!/bin/sh\nexec sleep 20\n".write(toFile: pinentry, atomically: true, encoding: .utf8)
        chmod(pinentry, 0o755)
        defer { unlink(pinentry) }
        let (setup, _, _) = try SecretServiceLockTests.lockedSetup(answers: [], pinentry: pinentry)
        let outcomes = try Self.attack(setup, ["prompts"])
        #expect(outcomes["Unlock x5, one connection"] as? [String] == ["prompt", "prompt", "prompt", "prompt", Self.limitsExceeded])
        #expect(outcomes["Prompt x4"] as? [String] == ["ok", "ok", "ok", "ok"])
        #expect(outcomes["Prompt of another connection"] as? String == Self.noSuchObject)
        #expect(outcomes["Dismiss of another connection"] as? String == Self.noSuchObject)
        #expect(outcomes["Completed to the owner"] as? Bool == true, "\(outcomes)")  // dismissed
        #expect(outcomes["Completed to another"] as? String == "none")
        #expect(outcomes["fifth dialog at once"] as? String == Self.limitsExceeded, "\(outcomes)")
        #expect(outcomes["Unlock on 16 more connections"] as? [String] == [Self.limitsExceeded], "\(outcomes)")
        #expect(setup.bridge.isRunning)
    }

    // MARK: resource exhaustion

    /// One app (one executable) opening sessions on connection after connection, or filling
    /// the session collection, gets its share and no more: another app of the same user is
    /// still served (docs/secret-service.md, "Limits").
    @Test(arguments: ["sessions", "items"])
    func oneAppsFloodLeavesAnotherAppServed(_ kind: String) throws {
        let (a, b, setup) = try SecretServiceItemTests.twoPythons(config: Self.separated)
        let flood = Process()
        flood.executableURL = URL(fileURLWithPath: a)
        flood.arguments = [SecretServiceScripts.path("attack.py"), "flood", kind]
        flood.environment = setup.environment
        let input = Pipe(), output = Pipe()
        flood.standardInput = input
        flood.standardOutput = output
        try flood.run()
        defer {
            try? input.fileHandleForWriting.close()
            flood.waitUntilExit()
        }
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line += chunk
        }
        let taken = try #require(try? JSONSerialization.jsonObject(with: line) as? [String: Any], "flood: \(String(decoding: line, as: UTF8.self))")
        #expect(taken["refusal"] as? String == Self.limitsExceeded, "\(taken)")
        #expect(taken["taken"] as? Int == (kind == "sessions" ? 128 : 256), "\(taken)")
        #expect(try Self.attack(setup, ["served", kind], interpreter: b)["answer"] as? String == "ok")
    }

    /// Secrets and labels over keychaind's limits, a session collection filled with labels,
    /// an attribute set over the limits and one just under them, deep nesting: each refused or
    /// answered, the bridge alive, serving, and its memory bounded.
    @Test func oversizedCallsAreRefusedAndTheBridgeKeepsServingWithBoundedMemory() throws {
        let setup = try SecretServiceSetup()
        _ = try Self.attack(setup, ["sessions"])  // the bridge's first calls grow it
        let before = Self.residentKiB(setup.bridge.pid)
        let outcomes = try Self.attack(setup, ["oversized"])
        for attempt in ["login 2 MiB secret", "login 2 MiB label", "Set 2 MiB label", "SetSecret 2 MiB",
                        "session 2 MiB secret", "session 20 MiB label", "SearchItems 128 x 1 KiB names"] {
            #expect(outcomes[attempt] as? String == Self.invalidArgs, "\(attempt): \(String(describing: outcomes[attempt]))")
        }
        #expect(outcomes["session filled with labels"] as? String == Self.limitsExceeded)
        #expect(outcomes["GetSecrets 20,000 paths"] as? String == Self.limitsExceeded)
        #expect((outcomes["GetSecrets seconds"] as? Double ?? 99) < 1)
        #expect(outcomes["SearchItems 127 pairs, 64 KiB"] as? [String] == [])
        #expect((outcomes["SearchItems seconds"] as? Double ?? 99) < 2)
        #expect(outcomes["CreateItem nested variants"] != nil)
        #expect(outcomes["still serving"] as? String == "s3cret", "\(outcomes)")
        #expect(setup.bridge.isRunning, "\(setup.bridge.log)")
        // The session collection holds at most 16 MiB; the rest is what the allocator keeps.
        let grown = Self.residentKiB(setup.bridge.pid) - before
        #expect(grown < 40 << 10, "the bridge grew by \(grown) KiB")
    }

    // MARK: the portal

    /// The descriptor comes from the sandboxed app through the portal: a full pipe whose
    /// reader it keeps, a pipe without a reader, a read end, a regular file. Each is response 2
    /// within a moment, nothing lands in a file, and the bridge serves others meanwhile.
    @Test(arguments: ["fullpipe", "noreader", "readend", "file"])
    func aPortalDescriptorThatCannotTakeTheSecretIsResponse2AndStallsNothing(kind: String) throws {
        let setup = try SecretServicePortalTests.setup()
        let outcomes = try Self.attack(setup, ["portal", kind])
        #expect(outcomes["response"] as? Int == 2, "\(outcomes)")
        #expect((outcomes["seconds"] as? Double ?? 99) < 2, "\(outcomes)")
        #expect(outcomes["after"] as? String == "ok")
        if kind == "file" { #expect(outcomes["file bytes"] as? Int == 0) }
    }

    // MARK: keychaind, without the bridge

    /// What let one D-Bus call stop the bridge: a request longer than keychaind's frame limit
    /// made keychaind close the connection, which the bridge shares between all its callers.
    /// The client refuses it before sending, and the connection goes on.
    @Test func aRequestOverTheFrameLimitIsRefusedBeforeItIsSentAndTheConnectionLives() throws {
        let d = try RunningDaemon()
        let connection = KeychainConnection(socketPath: d.socketPath)
        _ = try connection.status()
        expectStatus(.param) {
            _ = try connection.add(["class": .string("genp"), "svce": .string("big"), "labl": .string(String(repeating: "x", count: 2 << 20))])
        }
        #expect(try connection.status()["state"] != nil)
        #expect(!d.log.contains("closing connection"), "\(d.log)")
    }

    /// A client on the socket sending ops 17 and 18 itself gets its own groups' items only:
    /// another group's item (made while it held that group) is not found, not replaced, not
    /// named; a malformed xsat is refused and leaves the index as it was.
    @Test func attributeCallsOutsideAsCallerStayInTheCallersGroups() throws {
        let me = SecretServiceBridgeTests.bridge
        func config(_ groups: String) -> String {
            "[[app]]\nid = \"tests\"\nuids = [0]\nexecutables = [\"\(me)\"]\ngroups = [\(groups)]\n"
        }
        let d = try RunningDaemon(config: config("\"mine\", \"victim\""))
        func send(_ request: Request) throws -> Response {
            let socket = try UnixSocket.connect(path: d.socketPath)
            defer { socket.close() }
            try socket.writeAll(WireCodec.frame(request))
            let answer = try #require(try Frame.read(from: socket, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
            return try WireCodec.decodeResponse(answer)
        }
        let pairs = try SecretServiceAttributes(["owner": "victim"])
        func item(_ group: String, _ secret: String) -> AttributeDictionary {
            ["class": .string("genp"), "svce": .string("secret-service:login"), "xsat": .data(pairs.encoded),
             "labl": .string("l"), "v_Data": .data(bytes(secret)), "agrp": .string(group), "pdmn": .string("ck")]
        }
        #expect(try send(.attributeAdd(item("victim", "victim's"), replace: false)).status == 0)
        try config("\"mine\"").write(toFile: d.configPath, atomically: true, encoding: .utf8)
        kill(d.pid, SIGHUP)
        try waitUntil(timeout: 10, "the reload") { d.log.contains("config reloaded") }
        #expect(try send(.attributeSearch(collection: "login", exact: false, pairs: pairs)).result == .list([]))
        let planted = try send(.attributeAdd(item("mine", "planted"), replace: true))
        guard case .single(.attributes(let added)) = planted.result else { Issue.record("\(planted)"); return }
        #expect(added["replaced"] == .bool(false))
        #expect(try send(.attributeAdd(item("victim", "x"), replace: true)).status == KeychainStatus.missingEntitlement.rawValue)
        // A malformed xsat, by add and by update: refused; the index still finds the item.
        var bad = item("mine", "y")
        bad["xsat"] = .data([1, 0, 0, 0, 9, 9])
        #expect(try send(.add(bad)).status == KeychainStatus.param.rawValue)
        #expect(try send(.update(query: ["class": .string("genp"), "svce": .string("secret-service:login")],
                                 changes: ["xsat": .data([255, 255, 255, 255])])).status == KeychainStatus.param.rawValue)
        guard case .list(let mine) = try send(.attributeSearch(collection: "login", exact: true, pairs: pairs)).result else {
            Issue.record("no list"); return
        }
        #expect(mine.count == 1)
        // Given the group back, the victim's item is as it was.
        try config("\"victim\"").write(toFile: d.configPath, atomically: true, encoding: .utf8)
        kill(d.pid, SIGHUP)
        try waitUntil(timeout: 10, "the second reload") { d.log.components(separatedBy: "config reloaded").count > 2 }
        let secret = try send(.copyMatching(["class": .string("genp"), "svce": .string("secret-service:login"), "r_Data": .bool(true)]))
        #expect(secret.result == .single(.data(bytes("victim's"))), "\(secret)")
    }
}
