import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

@Suite("KeychainClient's async calls")
struct AsyncClientTests {
    private let query: AttributeDictionary = ["class": .string("genp"), "svce": .string("async"), "r_Data": .bool(true)]

    @Test func asyncCallsRoundTripThroughTheDaemon() async throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("async"), "acct": .string("me")]
        try await c.add(item.merging(["v_Data": .data(bytes("one"))]) { $1 })
        #expect(try await c.copyMatching(query) == .single(.data(bytes("one"))))
        try await c.update(item, ["v_Data": .data(bytes("two"))])
        #expect(try await c.copyMatching(query) == .single(.data(bytes("two"))))
        try await c.delete(item)
        await expectStatus(.itemNotFound) { _ = try await c.copyMatching(query) }
        #expect(try await c.status()["state"] == .string("unlocked"))
    }

    @Test func theTypedKeychainLayerHasTheSameCallsForAsyncCode() async throws {
        let d = try RunningDaemon()
        let keychain = Keychain(service: "async", connection: KeychainConnection(socketPath: d.socketPath))
        try await keychain.set("one", forKey: "k")
        try await keychain.set("two", forKey: "k")  // replaces
        #expect(try await keychain.string(forKey: "k") == "two")
        #expect(try await keychain.contains("k"))
        #expect(try await keychain.allKeys() == ["k"])
        try await keychain.remove(forKey: "k")
        #expect(try await keychain.data(forKey: "k") == nil)
        #expect(try await !keychain.contains("k"))
    }

    /// More calls than the cooperative pool has threads, all waiting for a daemon that holds its
    /// answers: if a call held a pool thread while it waited, this task could not run (nor the
    /// probe) until calls timed out, and the probe would see calls that had ended.
    @Test func callsWaitingForTheDaemonLeaveTheCooperativePoolFree() async throws {
        let daemon = try HeldAnswerDaemon()
        defer { daemon.stop() }
        let calls = ProcessInfo.processInfo.activeProcessorCount + 4
        let ended = Locked(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<calls {
                group.addTask {
                    defer { ended.withLock { $0 += 1 } }
                    let c = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 5_000)
                    let state = try await c.status()["state"]
                    #expect(state == .string("held"))
                }
            }
            while daemon.requestsReceived < calls { try await Task.sleep(for: .milliseconds(5)) }
            let endedWhileHeld = await Task.detached { ended.withLock { $0 } }.value
            #expect(endedWhileHeld == 0, "a task ran on the pool only after calls ended")
            daemon.release()
            try await group.waitForAll()
        }
        #expect(ended.withLock { $0 } == calls)
    }

    @Test func cancellingTheTaskEndsACallWaitingForTheDaemonWithUserCanceled() async throws {
        let daemon = try HeldAnswerDaemon()
        defer { daemon.stop() }
        let c = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 30_000)
        let call = Task { () async throws(KeychainError) -> QueryResult in try await c.copyMatching(query) }
        while daemon.requestsReceived < 1 { try await Task.sleep(for: .milliseconds(5)) }
        let cancelledAt = ContinuousClock.now
        call.cancel()
        await expectStatus(.userCanceled) { _ = try await call.value }
        // Far above any stall, far below the call's 30 s timeout: it did not wait that out.
        #expect(ContinuousClock.now - cancelledAt < .seconds(20), "the call waited for its timeout")
        // Not sent again on a new connection, as a read whose connection broke would be.
        #expect(daemon.requestsReceived == 1)
    }

    @Test func aConnectionWorksAgainAfterACancelledCall() async throws {
        let daemon = try HeldAnswerDaemon()
        defer { daemon.stop() }
        let c = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 30_000)
        let call = Task { () async throws(KeychainError) -> QueryResult in try await c.copyMatching(query) }
        while daemon.requestsReceived < 1 { try await Task.sleep(for: .milliseconds(5)) }
        call.cancel()
        _ = await call.result
        daemon.release()
        #expect(try await c.status()["state"] == .string("held"))
    }

    @Test func aCallFromAnAlreadyCancelledTaskIsNeverSent() async throws {
        let daemon = try HeldAnswerDaemon()
        defer { daemon.stop() }
        let c = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 30_000)
        let call = Task { () async throws(KeychainError) -> QueryResult in
            while !Task.isCancelled { await Task.yield() }
            return try await c.copyMatching(query)
        }
        call.cancel()
        await expectStatus(.userCanceled) { _ = try await call.value }
        #expect(daemon.requestsReceived == 0)
    }
}

/// Expects the async `body` to throw a KeychainError with `status`.
func expectStatus(_ status: KeychainStatus, sourceLocation: SourceLocation = #_sourceLocation,
                  _ body: () async throws -> Void) async {
    do {
        try await body()
        Issue.record("expected \(status), but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.status == status, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
}

/// A stand-in for keychaind that reads requests and answers none until released, then
/// answers every one (and any later one) with a status of state "held": a slow daemon, without
/// timers.
final class HeldAnswerDaemon: @unchecked Sendable {
    let socketPath: String
    private let directory: String
    private let listener: UnixSocket
    /// Guards `received`, `released` and `stopped`.
    private let condition = NSCondition()
    private var received = 0
    private var released = false
    private var stopped = false

    init() throws {
        var template = Array("/tmp/kch.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        directory = String(cString: p)
        socketPath = directory + "/s.sock"
        listener = try UnixSocket.listen(path: socketPath, mode: 0o600)
        Thread.detachNewThread { [self] in acceptConnections() }
    }

    var requestsReceived: Int {
        condition.lock()
        defer { condition.unlock() }
        return received
    }

    func release() {
        condition.lock()
        released = true
        condition.broadcast()
        condition.unlock()
    }

    func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
        listener.shutdownBoth()  // wakes accept()
        try? FileManager.default.removeItem(atPath: directory)
    }

    private func acceptConnections() {
        while let connection = try? listener.accept() {
            Thread.detachNewThread { [self] in answer(connection) }
        }
        listener.close()
    }

    private func answer(_ connection: UnixSocket) {
        defer { connection.close() }
        while (try? Frame.read(from: connection, idleTimeoutMs: 30_000, frameTimeoutMs: 5_000, maxPayload: Frame.maxPayloadBytes)) != nil {
            condition.lock()
            received += 1
            while !released && !stopped { condition.wait() }
            let stop = stopped
            condition.unlock()
            if stop { return }
            try? connection.writeAll(WireCodec.frame(Response(result: .single(.attributes(["state": .string("held")])))))
        }
    }
}
