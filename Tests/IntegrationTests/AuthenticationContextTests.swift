import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Authentication contexts (ops 49, 50, 52 and `u_CredRef`, issue 29) against the real daemon,
/// with the scripted pinentry of ItemsThatAskFirstTests: each SETDESC it records is one prompt.
@Suite("Authentication contexts")
struct AuthenticationContextTests {
    static let passcode = ItemsThatAskFirstTests.passcode

    /// A keychaind with a passcode, a prompt whose pinentry answers `answers`, contexts that
    /// last `maxAge` seconds, and the item that asks first of ItemsThatAskFirstTests.
    static func daemon(answers: [String], maxAge: Int = 300, idleTimeout: Int = 60) throws -> (RunningDaemon, log: String) {
        let pinentry = try ScriptedPinentry(answers: answers)
        // A longer idle time-out than the tests' default: a context lives as long as its connection.
        let d = try RunningDaemon(config: "idle_timeout_seconds = \(idleTimeout)\n\(pinentry.promptSection)\ncontext_max_age_seconds = \(maxAge)")
        #expect(try d.cli(["passcode", "set"], input: bytes(passcode + "\n")).status == 0)
        try KeychainConnection(socketPath: d.socketPath).add(ItemsThatAskFirstTests.item)
        return (d, pinentry.log)
    }

    /// How many times the person was asked.
    static func prompts(_ log: String) -> Int {
        ItemsThatAskFirstTests.said(log).split(separator: "\n").filter { $0.hasPrefix("SETDESC") }.count
    }

    static let secret = QueryResult.single(.data(Array("s3cret".utf8)))

    static func read(with reference: [UInt8], _ extra: AttributeDictionary = [:]) -> Request {
        .copyMatching(ItemsThatAskFirstTests.secretQuery.merging(["u_CredRef": .data(reference)]) { $1 }.merging(extra) { $1 })
    }

    @Test func aReadWithANewContextAsksOnceAndTheNextReadDoesNot() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = try RawConnection(d)
        let reference = try c.createContext()
        #expect(reference.count == 32)
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(Self.prompts(log) == 1)
    }

    /// An app keeps its LAContext as long as it likes: the idle timeout does not close a
    /// connection that holds one (it did, and the context went with it: a client's async call
    /// resumed late on a loaded machine found its context gone). Once the last context is
    /// invalidated, the timeout applies again.
    @Test func aConnectionHoldingAContextOutlivesTheIdleTimeout() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode], idleTimeout: 1)
        let c = try RawConnection(d)
        let reference = try c.createContext()
        Thread.sleep(forTimeInterval: 2.5)
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(Self.prompts(log) == 1)
        #expect(try c.send(.contextInvalidate(reference: reference)).status == 0)
        Thread.sleep(forTimeInterval: 4)
        #expect(try Frame.read(from: c.socket, idleTimeoutMs: 1000, frameTimeoutMs: 1000) == nil)
    }

    @Test func contextAuthenticateAsksWithItsReasonAndSparesTheReads() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = try RawConnection(d)
        let reference = try c.createContext()
        #expect(try c.send(.contextAuthenticate(reference: reference, reason: "deploy the release")).status == 0)
        let said = ItemsThatAskFirstTests.said(log)
        #expect(said.contains("(pid \(getpid())) wants to use keychain items that ask first"), "\(said)")
        #expect(said.contains("Its reason: deploy the release"), "\(said)")
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(Self.prompts(log) == 1)
    }

    @Test func anAuthenticatedContextReadsWithFailAndKeepsTheItemWithSkip() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = try RawConnection(d)
        let reference = try c.createContext()
        #expect(try c.send(.contextAuthenticate(reference: reference, reason: "")).status == 0)
        #expect(try c.send(Self.read(with: reference, ["u_AuthUI": .string("u_AuthUIF")])).result == Self.secret)
        #expect(try c.send(Self.read(with: reference, ["u_AuthUI": .string("u_AuthUIS")])).result == Self.secret)
        #expect(Self.prompts(log) == 1)
    }

    @Test func afterItsMaximumAgeAReadAsksAgain() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode, Self.passcode], maxAge: 1)
        let c = try RawConnection(d)
        let reference = try c.createContext()
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        Thread.sleep(forTimeInterval: 1.5)
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(Self.prompts(log) == 2)
    }

    @Test func aLockEndsTheAuthentication() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode, Self.passcode])
        let c = try RawConnection(d)
        let reference = try c.createContext()
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(try c.send(.lock).status == 0)
        #expect(try c.send(.unlock(passcode: SecretBytes(bytes(Self.passcode)))).status == 0)
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(Self.prompts(log) == 2)
    }

    @Test func anInvalidatedContextIsUnknownAndAReadWithoutItAsks() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode, Self.passcode])
        let c = try RawConnection(d)
        let reference = try c.createContext()
        #expect(try c.send(Self.read(with: reference)).result == Self.secret)
        #expect(try c.send(.contextInvalidate(reference: reference)).status == 0)
        #expect(try c.send(Self.read(with: reference)).status == KeychainStatus.param.rawValue)
        #expect(try c.send(.copyMatching(ItemsThatAskFirstTests.secretQuery)).result == Self.secret)
        #expect(Self.prompts(log) == 2)
    }

    /// The attack: a reference learnt by another connection of the same process.
    @Test func anotherConnectionCannotUseTheReference() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let mine = try RawConnection(d)
        let reference = try mine.createContext()
        #expect(try mine.send(.contextAuthenticate(reference: reference, reason: "")).status == 0)
        let other = try RawConnection(d)
        #expect(try other.send(Self.read(with: reference)).status == KeychainStatus.param.rawValue)
        #expect(try other.send(.contextAuthenticate(reference: reference, reason: "")).status == KeychainStatus.param.rawValue)
        #expect(try other.send(.contextInvalidate(reference: reference)).status == KeychainStatus.param.rawValue)
        #expect(try mine.send(Self.read(with: reference)).result == Self.secret)
        #expect(Self.prompts(log) == 1)
    }

    /// The attack: a made-up reference, of the right length and of others.
    @Test func aGuessedReferenceIsParamAndAsksNobody() throws {
        let (d, log) = try Self.daemon(answers: [Self.passcode])
        let c = try RawConnection(d)
        _ = try c.createContext()
        for guess in [[UInt8](repeating: 0, count: 32), (0..<32).map { _ in UInt8.random(in: 0...255) }, [1]] {
            #expect(try c.send(Self.read(with: guess)).status == KeychainStatus.param.rawValue)
            #expect(try c.send(.contextAuthenticate(reference: guess, reason: "")).status == KeychainStatus.param.rawValue)
            #expect(try c.send(.contextInvalidate(reference: guess)).status == KeychainStatus.param.rawValue)
        }
        #expect(Self.prompts(log) == 0)
    }

    /// The attack: another process given the reference, and a forked child holding the
    /// connection that made it, once on a connection of its own and once on the inherited one
    /// after its parent exited.
    @Test func anotherProcessAndAForkedChildCannotUseTheReference() throws {
        let (d, log) = try Self.daemon(answers: [])
        let c = try RawConnection(d)
        let reference = try c.createContext()
        let script = SecretServiceScripts.path("context_reuse.py")
        let hex = reference.map { String(format: "%02x", $0) }.joined()
        let other = try runExecutable(script, [d.socketPath, "other", hex], environment: [:], input: [])
        #expect(other.text == "other -50\n", "\(other.text) \(other.stderr)")
        let forked = try runExecutable(script, [d.socketPath, "fork"], environment: [:], input: [])
        let lines = Set(forked.text.split(separator: "\n").map(String.init))
        #expect(lines == ["parent -25300", "own -50", "inherited -50"], "\(forked.text) \(forked.stderr)")
        #expect(Self.prompts(log) == 0)
    }

    /// The attack: the process that made the context execs another program, which inherits
    /// the connection (keychaind tells apps apart by executable nowhere here, so the
    /// connection itself stays usable).
    @Test func aProgramExecdByTheProcessCannotUseItsContext() throws {
        let (d, log) = try Self.daemon(answers: [])
        var template = Array("/tmp/kcy.XXXXXX".utf8CString)
        let directory = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let python = directory + "/python-copy"
        try FileManager.default.copyItem(atPath: URL(fileURLWithPath: "/usr/bin/python3").resolvingSymlinksInPath().path, toPath: python)
        chmod(python, 0o755)
        let run = try runExecutable(SecretServiceScripts.path("context_reuse.py"), [d.socketPath, "exec", python], environment: [:], input: [])
        #expect(run.text == "before-exec -25300\nafter-exec -50\n", "\(run.text) \(run.stderr)")
        #expect(Self.prompts(log) == 0)
    }

    @Test func statusCountsTheConnectionsOwnContexts() throws {
        let (d, _) = try Self.daemon(answers: [])
        let c = try RawConnection(d)
        let first = try c.createContext()
        _ = try c.createContext()
        #expect(try c.status()["contexts"] == .int(2))
        #expect(try c.send(.contextInvalidate(reference: first)).status == 0)
        #expect(try c.status()["contexts"] == .int(1))
        #expect(try RawConnection(d).status()["contexts"] == nil)
    }

    /// The attack: a flood of contextCreate. Each connection holds at most 16 and each uid 64;
    /// past them errSecAllocate, and a closed connection's contexts are freed.
    @Test func aFloodOfContextCreateIsRefusedPastTheBounds() throws {
        let (d, _) = try Self.daemon(answers: [])
        var connections: [RawConnection] = []
        for _ in 0..<4 {
            let c = try RawConnection(d)
            for _ in 0..<16 { _ = try c.createContext() }
            #expect(try c.send(.contextCreate).status == KeychainStatus.allocate.rawValue)
            connections.append(c)
        }
        let fifth = try RawConnection(d)
        #expect(try fifth.send(.contextCreate).status == KeychainStatus.allocate.rawValue)
        connections.removeLast().close()
        try waitUntil(timeout: 10, "the closed connection's contexts to be freed") {
            try fifth.send(.contextCreate).status == 0
        }
    }
}

/// One connection to the daemon sending requests as they are (contexts belong to it).
final class RawConnection {
    let socket: UnixSocket
    private var closed = false

    init(_ d: RunningDaemon) throws {
        socket = try UnixSocket.connect(path: d.socketPath)
    }

    deinit { close() }

    func close() {
        guard !closed else { return }
        closed = true
        socket.close()
    }

    func send(_ request: Request) throws -> Response {
        try socket.writeAll(WireCodec.frame(request))
        let answer = try #require(try Frame.read(from: socket, idleTimeoutMs: 60_000, frameTimeoutMs: 60_000))
        return try WireCodec.decodeResponse(answer)
    }

    func createContext() throws -> [UInt8] {
        let response = try send(.contextCreate)
        guard case .single(.data(let reference)) = response.result else {
            throw KeychainError(.decode, "contextCreate answered \(response)")
        }
        return Array(reference)
    }

    func status() throws -> AttributeDictionary {
        guard case .single(.attributes(let info)) = try send(.status).result else { throw KeychainError(.decode, "status") }
        return info
    }
}
