import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// keychaind's side of the Secret Service bridge (docs/security.md, "Calls through the Secret
/// Service bridge"): this test process plays the bridge (its own executable is listed in
/// bridge_executables) and speaks for processes it starts.
@Suite("The Secret Service bridge speaks for its callers, and only for them", .serialized)
struct SecretServiceBridgeTests {
    /// This test process's executable: the fake bridge.
    static let bridge: String = {
        guard let p = realpath("/proc/self/exe", nil) else { return "" }
        defer { free(p) }
        return String(cString: p)
    }()

    static func realPath(_ path: String) -> String {
        guard let p = realpath(path, nil) else { return path }
        defer { free(p) }
        return String(cString: p)
    }

    func daemon(_ extra: String = "", bridge: Bool = true) throws -> RunningDaemon {
        try RunningDaemon(config: (bridge ? "bridge_executables = [\"\(Self.bridge)\"]\n" : "") + extra)
    }

    /// A process to speak for: `executable` sleeping (under `uid` if given), killed at the end.
    final class Callee {
        let process: Process
        let identity: CallerIdentity

        init(_ executable: String = "/usr/bin/sleep", asUser uid: UInt32? = nil) throws {
            process = Process()
            if let uid {
                process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
                process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", executable, "30"]
            } else {
                process.executableURL = URL(fileURLWithPath: executable)
                process.arguments = ["30"]
            }
            try process.run()
            let pid = process.processIdentifier
            // Wait for the exec (setpriv's, then sleep's) so that /proc shows the final program.
            for _ in 0..<200 {
                if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe"),
                   !exe.hasSuffix("setpriv") { break }
                usleep(5_000)
            }
            identity = CallerIdentity(pid: pid, startTime: try #require(SecretServiceBridgeTests.startTime(of: pid)))
        }

        func end() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }

        deinit { end() }
    }

    /// Field 22 of /proc/PID/stat, read after the command name.
    static func startTime(of pid: Int32) -> UInt64? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }

    static let collection = "login"

    func item(_ attributes: [String: String], secret: String, label: String = "an item") throws -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("secret-service:\(Self.collection)"),
         "xsat": .data(try SecretServiceAttributes(attributes).encoded), "labl": .string(label),
         "xsct": .string("text/plain"), "v_Data": .data(bytes(secret)), "pdmn": .string("ck")]
    }

    func secret(_ keychain: DelegatedKeychain, _ ref: [UInt8]) throws -> [UInt8]? {
        guard case .single(.data(let d)) = try keychain.copyMatching(["v_PersistentRef": .data(ref), "r_Data": .bool(true)]) else { return nil }
        return Array(d)
    }

    // MARK: the calls

    @Test func itemsAddedForACallerAreFoundByTheirAttributesAndAreKeychainItems() throws {
        let d = try daemon()
        let callee = try Callee()
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity)
        let (ref, replaced) = try keychain.attributeAdd(try item(["service": "mail", "user": "alice"], secret: "pw1"), replace: false)
        #expect(!replaced && ref.count == 20)
        _ = try keychain.attributeAdd(try item(["service": "mail", "user": "bob"], secret: "pw2"), replace: false)
        let found = try keychain.attributeSearch(collection: Self.collection, exact: false,
                                                 pairs: try SecretServiceAttributes(["user": "alice"]))
        #expect(found.map(\.persistentRef) == [ref])
        #expect(found.first?.locked == false && found.first?.protection == "ck" && found.first?.accessGroup == "uid.0")
        #expect(abs((found.first?.created ?? 0) - Date().timeIntervalSince1970) < 60)
        #expect(try keychain.attributeSearch(collection: Self.collection, exact: false,
                                             pairs: try SecretServiceAttributes(["service": "mail"])).count == 2)
        #expect(try keychain.attributeSearch(collection: Self.collection, exact: true,
                                             pairs: try SecretServiceAttributes(["service": "mail"])).isEmpty)
        #expect(try keychain.attributeSearch(collection: "other", exact: false, pairs: try SecretServiceAttributes([:])).isEmpty)
        #expect(try secret(keychain, ref) == bytes("pw1"))
        // A keychain item like any other: the CLI lists it under its collection's service.
        let list = try d.cli(["list"])
        #expect(list.text.contains("secret-service:login"), "\(list.text)")
    }

    @Test func replaceRewritesTheItemWithTheSameAttributesAndKeepsItsIdentity() throws {
        let d = try daemon()
        let callee = try Callee()
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity)
        let attributes = ["xdg:schema": "org.example.Password", "user": "alice"]
        let first = try keychain.attributeAdd(try item(attributes, secret: "old", label: "first"), replace: true)
        #expect(!first.replaced)
        let created = try #require(try keychain.attributeSearch(collection: Self.collection, exact: true,
                                                                pairs: try SecretServiceAttributes(attributes)).first)
        let second = try keychain.attributeAdd(try item(attributes, secret: "new", label: "second"), replace: true)
        #expect(second.replaced && second.persistentRef == first.persistentRef)
        #expect(try secret(keychain, first.persistentRef) == bytes("new"))
        let after = try #require(try keychain.attributeSearch(collection: Self.collection, exact: false,
                                                              pairs: try SecretServiceAttributes(attributes)).first)
        #expect(after.created == created.created && after.modified > created.modified)
        // A superset is another set: replace adds.
        let other = try keychain.attributeAdd(try item(attributes.merging(["extra": "1"]) { $1 }, secret: "x"), replace: true)
        #expect(!other.replaced && other.persistentRef != first.persistentRef)
    }

    // MARK: who may send asCaller

    @Test func aSenderNotInBridgeExecutablesIsRefused() throws {
        let d = try daemon(bridge: false)
        let callee = try Callee()
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity)
        do {
            _ = try keychain.status()
            Issue.record("a program that is not a bridge spoke for another process")
        } catch {
            #expect(error.status == .missingEntitlement && error.message.contains("bridge_executables"), "\(error)")
        }
        // Its own calls still work.
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["groups"] == .string("uid.0"))
    }

    @Test func aReloadThatTakesTheBridgeOffTheListEndsItsAsCaller() throws {
        let d = try daemon()
        let callee = try Callee()
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity)
        #expect(try keychain.status()["groups"] == .string("uid.0"))
        try "log_level = \"debug\"\nbridge_executables = []\n".write(toFile: d.configPath, atomically: true, encoding: .utf8)
        kill(d.pid, SIGHUP)
        var refused: KeychainError?
        for _ in 0..<200 where refused == nil {
            do { _ = try keychain.status() } catch { refused = error }
            usleep(10_000)
        }
        #expect(refused?.status == .missingEntitlement, "\(String(describing: refused))")
    }

    @Test func aCallerOfAnotherUidIsRefused() throws {
        let d = try daemon()
        let other = try MultiUserTests.user("kcapp-a")
        let callee = try Callee(asUser: other)
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity)
        expectStatus(.missingEntitlement) { _ = try keychain.status() }
        do { _ = try keychain.status() } catch { #expect(error.message.contains("uid \(other)"), "\(error)") }
    }

    @Test func aCallerThatExitedIsRefused() throws {
        let d = try daemon()
        let callee = try Callee()
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity)
        #expect(try keychain.status()["groups"] == .string("uid.0"))  // known to the bridge's cache now
        callee.end()
        do {
            _ = try keychain.status()
            Issue.record("a call was made for a process that has exited")
        } catch {
            #expect(error.status == .missingEntitlement && error.message.contains("has exited"), "\(error)")
        }
    }

    /// A process that forked and exited, not yet waited for by its parent: /proc still shows
    /// it, with its start time, as a zombie.
    @Test func aCallerThatExitedButWasNotWaitedForIsRefused() throws {
        let d = try daemon()
        let parent = Process()
        parent.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        parent.arguments = ["-c", "import os, time\npid = os.fork()\nif pid == 0: os._exit(0)\nprint(pid, flush=True)\ntime.sleep(30)"]
        let out = Pipe()
        parent.standardOutput = out
        try parent.run()
        defer { kill(parent.processIdentifier, SIGKILL); parent.waitUntilExit() }
        let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        let pid = try #require(Int32(line.trimmingCharacters(in: .whitespacesAndNewlines)))
        usleep(50_000)
        let identity = CallerIdentity(pid: pid, startTime: try #require(Self.startTime(of: pid)))
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: identity)
        do {
            _ = try keychain.status()
            Issue.record("a call was made for a process that has exited")
        } catch {
            #expect(error.status == .missingEntitlement && error.message.contains("has exited"), "\(error)")
        }
    }

    /// Known to the bridge's connection first, then exited and left unreaped.
    @Test func aKnownCallerThatExitsWithoutBeingWaitedForIsRefused() throws {
        let d = try daemon()
        let parent = Process()
        parent.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        parent.arguments = ["-c", "import os, sys, time\npid = os.fork()\nif pid == 0:\n    sys.stdin.read()\n    os._exit(0)\nprint(pid, flush=True)\ntime.sleep(30)"]
        let input = Pipe(), out = Pipe()
        parent.standardInput = input
        parent.standardOutput = out
        try parent.run()
        defer { kill(parent.processIdentifier, SIGKILL); parent.waitUntilExit() }
        let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self)
        let pid = try #require(Int32(line.trimmingCharacters(in: .whitespacesAndNewlines)))
        let identity = CallerIdentity(pid: pid, startTime: try #require(Self.startTime(of: pid)))
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: identity)
        #expect(try keychain.status()["groups"] == .string("uid.0"))
        try input.fileHandleForWriting.close()  // the child exits; its parent sleeps on
        for _ in 0..<200 {
            if let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), stat.contains(") Z ") { break }
            usleep(5_000)
        }
        do {
            _ = try keychain.status()
            Issue.record("a call was made for a process that has exited")
        } catch {
            #expect(error.status == .missingEntitlement && error.message.contains("has exited"), "\(error)")
        }
    }

    @Test func aReusedPidIsCaughtByItsStartTime() throws {
        let d = try daemon()
        let callee = try Callee()
        let wrong = CallerIdentity(pid: callee.identity.pid, startTime: callee.identity.startTime + 1)
        let keychain = KeychainConnection(socketPath: d.socketPath).onBehalf(of: wrong)
        do {
            _ = try keychain.status()
            Issue.record("a call was made for a process whose start time differs")
        } catch {
            #expect(error.status == .missingEntitlement && error.message.contains("start time"), "\(error)")
        }
    }

    @Test func anAsCallerInsideAnAsCallerIsAParameterError() throws {
        let d = try daemon()
        let callee = try Callee()
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        let inner = Request.asCaller(pid: callee.identity.pid, startTime: callee.identity.startTime, inner: .status)
        try socket.writeAll(WireCodec.frame(.asCaller(pid: callee.identity.pid, startTime: callee.identity.startTime, inner: inner)))
        let answer = try #require(try Frame.read(from: socket, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
        #expect(try WireCodec.decodeResponse(answer).status == KeychainStatus.param.rawValue)
    }

    /// A bridge (python, listed) connects and speaks for a process, then execs another program
    /// (a copy of python elsewhere) that inherits the connection and tries again.
    static let execingBridge = #"""
    import os, socket, struct, sys
    def call(s, pid, start):
        payload = bytes([1, 16]) + struct.pack("<IQ", pid, start) + bytes([1, 5])
        try:
            s.sendall(struct.pack("<I", len(payload)) + payload)
            head = s.recv(4, socket.MSG_WAITALL)
        except OSError:
            return "closed"
        if len(head) < 4: return "closed"
        body = s.recv(struct.unpack("<I", head)[0], socket.MSG_WAITALL)
        return str(struct.unpack("<i", body[1:5])[0])
    pid, start = int(sys.argv[2]), int(sys.argv[3])
    if sys.argv[1] == "first":
        s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[4])
        print(call(s, pid, start), flush=True)
        os.set_inheritable(s.fileno(), True)
        os.execv(sys.argv[5], [sys.argv[5], "-c", sys.argv[6], "second", str(pid), str(start), str(s.fileno())])
    else:
        s = socket.socket(fileno=int(sys.argv[4]))
        print(call(s, pid, start), flush=True)
        print(call(s, pid, start), flush=True)
    """#

    @Test func aBridgeThatExecsAnotherProgramLosesItsConnection() throws {
        let (python, other) = try CallerIdentityTests.pythons(in: "/tmp")
        defer { unlink(other) }
        let d = try RunningDaemon(config: "bridge_executables = [\"\(python)\"]\n")
        let callee = try Callee()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = ["-c", Self.execingBridge, "first", String(callee.identity.pid), String(callee.identity.startTime),
                       d.socketPath, other, Self.execingBridge]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let lines = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n").map(String.init)
        p.waitUntilExit()
        #expect(lines == ["0", String(KeychainStatus.missingEntitlement.rawValue), "closed"], "\(lines)")
    }

    // MARK: per-app confinement through the bridge

    @Test func appsToldApartByExecutableGetTheirOwnGroupsAndCannotSeeEachOthersItems() throws {
        let root = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let appA = try Self.copyOfSleep(root + "/app-a"), appB = try Self.copyOfSleep(root + "/app-b")
        let d = try daemon("""
            [[app]]
            id = "a"
            uids = [0]
            executables = ["\(appA)"]
            groups = ["a.group"]
            [[app]]
            id = "b"
            uids = [0]
            executables = ["\(appB)"]
            groups = ["b.group"]
            [[app]]
            id = "bridge"
            uids = [0]
            executables = ["\(Self.bridge)"]
            groups = ["bridge.own"]
            """)
        let a = try Callee(appA), b = try Callee(appB)
        let connection = KeychainConnection(socketPath: d.socketPath)
        let asA = connection.onBehalf(of: a.identity), asB = connection.onBehalf(of: b.identity)
        #expect(try asA.status()["groups"] == .string("a.group"))
        #expect(try asB.status()["groups"] == .string("b.group"))
        let pairs = ["service": "db"]
        let (ref, _) = try asA.attributeAdd(try item(pairs, secret: "A's"), replace: false)
        #expect(try asA.attributeSearch(collection: Self.collection, exact: false, pairs: try SecretServiceAttributes(pairs)).map(\.accessGroup) == ["a.group"])
        #expect(try asB.attributeSearch(collection: Self.collection, exact: false, pairs: try SecretServiceAttributes(pairs)).isEmpty)
        expectStatus(.itemNotFound) { _ = try secret(asB, ref) }
        // B's replace of the same attributes makes B's own item; A's stays.
        #expect(try !asB.attributeAdd(try item(pairs, secret: "B's"), replace: true).replaced)
        #expect(try secret(asA, ref) == bytes("A's"))
        // The bridge's own calls get the bridge's own groups, not its callers'.
        #expect(try connection.status()["groups"] == .string("bridge.own"))
    }

    // MARK: portal secrets

    @Test func thePortalGetsOneSecretPerAppAndOnlyThePortal() throws {
        let sleep = Self.realPath("/usr/bin/sleep")
        let d = try daemon("portal_executables = [\"\(sleep)\"]")
        let portal = try Callee(sleep)
        let connection = KeychainConnection(socketPath: d.socketPath)
        let asPortal = connection.onBehalf(of: portal.identity)
        let first = try asPortal.portalSecret(appID: "org.example.App")
        #expect(first.count == 64)
        #expect(try asPortal.portalSecret(appID: "org.example.App") == first)
        #expect(try asPortal.portalSecret(appID: "org.example.Other") != first)
        expectStatus(.param) { _ = try asPortal.portalSecret(appID: "a/b") }
        // Kept in the app's own group, which no caller has.
        expectStatus(.itemNotFound) { _ = try connection.copyMatching(["class": .string("genp"), "svce": .string("org.freedesktop.portal.Secret")]) }
        // Another process of the same user is not the portal.
        let root = try Self.scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let other = try Callee(try Self.copyOfSleep(root + "/not-the-portal"))
        expectStatus(.missingEntitlement) { _ = try connection.onBehalf(of: other.identity).portalSecret(appID: "org.example.App") }
    }

    @Test func aPortalSecretIsNeverGivenOutsideAsCaller() throws {
        let d = try daemon()
        let socket = try UnixSocket.connect(path: d.socketPath)
        defer { socket.close() }
        try socket.writeAll(WireCodec.frame(.portalSecret(appID: "org.example.App")))
        let answer = try #require(try Frame.read(from: socket, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
        #expect(try WireCodec.decodeResponse(answer).status == KeychainStatus.missingEntitlement.rawValue)
    }

    @Test func theAuditLogNamesTheBridge() throws {
        let path = "/tmp/kc-audit-bridge-\(getpid()).jsonl"
        defer { unlink(path) }
        let d = try daemon("audit_log = \"\(path)\"")
        let callee = try Callee()
        _ = try KeychainConnection(socketPath: d.socketPath).onBehalf(of: callee.identity).status()
        d.stop()
        let line = try String(contentsOfFile: path, encoding: .utf8)
        #expect(line.contains("\"pid\":\(callee.identity.pid)"), "\(line)")
        #expect(line.contains("\"via\":\"secret-service\"") && line.contains("\"bridge_pid\":\(getpid())"), "\(line)")
    }
}

extension SecretServiceBridgeTests {
    /// The portal process is the caller keychaind sees; the line must also say which app's
    /// secret it was given.
    @Test func theAuditLineOfAPortalSecretNamesTheAppID() throws {
        let path = "/tmp/kc-audit-portal-\(getpid()).jsonl"
        defer { unlink(path) }
        let sleep = Self.realPath("/usr/bin/sleep")
        let d = try daemon("portal_executables = [\"\(sleep)\"]\naudit_log = \"\(path)\"")
        let portal = try Callee(sleep)
        _ = try KeychainConnection(socketPath: d.socketPath).onBehalf(of: portal.identity).portalSecret(appID: "org.example.Audited")
        d.stop()
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").filter { $0.contains("portalSecret") }
        #expect(lines.count == 1 && lines[0].contains("\"portal_app\":\"org.example.Audited\""), "\(lines)")
        #expect(lines.first?.contains("\"pid\":\(portal.identity.pid)") == true, "\(lines)")
    }
}

private extension SecretServiceBridgeTests {
    /// A directory for programs a config must name before the daemon starts.
    static func scratchDirectory() throws -> String {
        var template = Array("/tmp/kcb.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        chmod(p, 0o755)
        return String(cString: p)
    }

    /// Another program, as far as /proc/PID/exe tells: sleep copied to `path`.
    static func copyOfSleep(_ path: String) throws -> String {
        try FileManager.default.copyItem(atPath: realPath("/usr/bin/sleep"), toPath: path)
        return path
    }
}
