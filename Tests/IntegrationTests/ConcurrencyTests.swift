import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing


private let sharedItem: AttributeDictionary = ["class": .string("genp"), "svce": .string("shared"), "acct": .string("everyone")]
private let sharedSecret: [UInt8] = bytes("shared-secret") + [0, 0xFF]

/// What one client's items should hold: account -> secret.
private typealias ClientModel = [String: [UInt8]]

/// The outcome of a mixed workload.
private struct WorkloadResult {
    var errors: [String]
    var models: [ClientModel]
    var seconds: Double
    var finished: Bool
}

private func service(_ client: Int) -> String { "client-\(client)" }

private func itemQuery(_ client: Int, _ account: String) -> AttributeDictionary {
    ["class": .string("genp"), "svce": .string(service(client)), "acct": .string(account)]
}

/// Every item `query` matches with its attributes and secret; empty when there is none.
private func matches(_ c: KeychainConnection, _ query: AttributeDictionary) throws(KeychainError) -> [ItemResult] {
    let all: QueryResult
    do {
        all = try c.copyMatching(query.merging(["m_Limit": .string("m_LimitAll"), "r_Attributes": .bool(true), "r_Data": .bool(true)]) { $1 })
    } catch {
        if error.status == .itemNotFound { return [] }
        throw error
    }
    guard case .list(let items) = all else { throw KeychainError(.decode, "m_LimitAll answered \(all)") }
    return items
}

/// One client's rounds: add, read, update and delete on its own four accounts (checking
/// each answer against its own model) plus a read of the shared item. Returns the model and
/// the first unexpected answer, where it stopped.
private func runClient(_ i: Int, _ c: KeychainConnection, iterations: Int) -> (ClientModel, String?) {
    var model = ClientModel()
    for j in 0..<iterations {
        let account = "k\(j % 4)"
        let query = itemQuery(i, account)
        let value = bytes("c\(i)-r\(j)-") + [UInt8(i), UInt8(j), 0]
        do throws(KeychainError) {
            if model[account] == nil {
                try c.add(query.merging(["v_Data": .data(value)]) { $1 })
                model[account] = value
            } else if j % 3 == 0 {
                try c.delete(query)
                model[account] = nil
                guard try matches(c, query).isEmpty else { return (model, "round \(j): \(account) still found after delete") }
            } else {
                try c.update(query, ["v_Data": .data(value)])
                model[account] = value
            }
            if let expected = model[account] {
                let got = try c.copyMatching(query.merging(["r_Data": .bool(true)]) { $1 })
                guard got == .single(.data(expected)) else {
                    return (model, "round \(j): \(account) read \(got), expected \(expected)")
                }
            }
            let shared = try c.copyMatching(sharedItem.merging(["r_Data": .bool(true)]) { $1 })
            guard shared == .single(.data(sharedSecret)) else { return (model, "round \(j): shared item read \(shared)") }
        } catch {
            return (model, "round \(j): \(error)")
        }
    }
    return (model, nil)
}

/// Runs `clients` threads at once, each with its own connection, through `runClient`.
private func runMixedWorkload(_ d: RunningDaemon, clients: Int, iterations: Int) -> WorkloadResult {
    let errors = Locked([String]())
    let models = Locked([ClientModel](repeating: [:], count: clients))
    let done = DispatchGroup()
    let start = Date()
    for i in 0..<clients {
        done.enter()
        Thread {
            let c = KeychainConnection(socketPath: d.socketPath, timeoutMs: 15_000)
            let (model, error) = runClient(i, c, iterations: iterations)
            models.withLock { $0[i] = model }
            if let error { errors.withLock { $0.append("client \(i) \(error)") } }
            done.leave()
        }.start()
    }
    let finished = done.wait(timeout: .now() + 30) == .success
    return WorkloadResult(errors: errors.withLock { $0 }, models: models.withLock { $0 },
                          seconds: Date().timeIntervalSince(start), finished: finished)
}

/// Every client's items in the daemon are exactly its model: same accounts, same secrets.
private func expectDaemonMatches(_ models: [ClientModel], _ d: RunningDaemon,
                                 sourceLocation: SourceLocation = #_sourceLocation) throws {
    let c = KeychainConnection(socketPath: d.socketPath)
    for (i, model) in models.enumerated() {
        var stored = ClientModel()
        for item in try matches(c, ["class": .string("genp"), "svce": .string(service(i))]) {
            guard case .attributes(let a) = item, case .string(let acct)? = a["acct"], case .data(let secret)? = a["v_Data"] else {
                Issue.record("client \(i): unexpected item \(item)", sourceLocation: sourceLocation)
                continue
            }
            #expect(stored.updateValue(Array(secret), forKey: acct) == nil, "client \(i): \(acct) stored twice", sourceLocation: sourceLocation)
        }
        #expect(stored == model, "client \(i): daemon holds \(stored), client expects \(model)", sourceLocation: sourceLocation)
    }
    #expect(try c.copyMatching(sharedItem.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(sharedSecret)),
            sourceLocation: sourceLocation)
}

/// A daemon whose idle and frame timeouts are long (60 s), so a slow client stays connected
/// for the whole of a test unless the daemon misbehaves.
private func patientDaemon() throws -> RunningDaemon {
    try RunningDaemon(config: "idle_timeout_seconds = 60\nframe_timeout_seconds = 60")
}

/// Whether the daemon has closed (or written to) `socket`, without waiting.
private func hasBeenClosed(_ socket: UnixSocket) -> Bool {
    var pfd = pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0)
    return poll(&pfd, 1, 0) != 0
}

@Suite("Many clients at once", .serialized)
struct ConcurrencyTests {
    @Test func thirtyTwoClientsDoingMixedOperationsSeeNoErrorAndConsistentState() throws {
        let d = try RunningDaemon()
        try KeychainConnection(socketPath: d.socketPath).add(sharedItem.merging(["v_Data": .data(sharedSecret)]) { $1 })
        let result = runMixedWorkload(d, clients: 32, iterations: 50)
        #expect(result.finished, "the workload did not finish within 30 s")
        #expect(result.errors.isEmpty, "\(result.errors.count) errors, first: \(result.errors.prefix(5))")
        #expect(result.models.contains { !$0.isEmpty })
        if result.errors.isEmpty { try expectDaemonMatches(result.models, d) }
        #expect(d.process?.isRunning == true)
    }

    @Test func silentClientDoesNotDelayTheOthers() throws {
        let d = try patientDaemon()
        try KeychainConnection(socketPath: d.socketPath).add(sharedItem.merging(["v_Data": .data(sharedSecret)]) { $1 })
        let slow = try UnixSocket.connect(path: d.socketPath)  // connected, sends nothing
        defer { slow.close() }
        let result = runMixedWorkload(d, clients: 32, iterations: 50)
        #expect(result.finished, "the workload did not finish within 30 s")
        #expect(result.seconds < 10, "the workload took \(result.seconds) s with a silent client connected")
        #expect(result.errors.isEmpty, "\(result.errors.count) errors, first: \(result.errors.prefix(5))")
        if result.errors.isEmpty { try expectDaemonMatches(result.models, d) }
        // The silent client was connected the whole time, and is still served when it speaks.
        #expect(!hasBeenClosed(slow))
        try slow.writeAll(Frame.encode(WireCodec.encode(.status)))
        let answer = try #require(try Frame.read(from: slow, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
        #expect(try WireCodec.decodeResponse(answer).status == 0)
    }

    @Test func clientStalledMidFrameDoesNotDelayTheOthers() throws {
        let d = try patientDaemon()
        try KeychainConnection(socketPath: d.socketPath).add(sharedItem.merging(["v_Data": .data(sharedSecret)]) { $1 })
        let slow = try UnixSocket.connect(path: d.socketPath)
        defer { slow.close() }
        let frame = Frame.encode(WireCodec.encode(.add(itemQuery(99, "stalled").merging(["v_Data": .data(bytes("half"))]) { $1 })))
        try slow.writeAll(Array(frame.prefix(frame.count / 2)))  // half a frame, then nothing
        let result = runMixedWorkload(d, clients: 32, iterations: 50)
        #expect(result.finished, "the workload did not finish within 30 s")
        #expect(result.seconds < 10, "the workload took \(result.seconds) s with a stalled client connected")
        #expect(result.errors.isEmpty, "\(result.errors.count) errors, first: \(result.errors.prefix(5))")
        if result.errors.isEmpty { try expectDaemonMatches(result.models, d) }
        // The stalled request finishes when the rest arrives.
        #expect(!hasBeenClosed(slow))
        try slow.writeAll(Array(frame.dropFirst(frame.count / 2)))
        let answer = try #require(try Frame.read(from: slow, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
        #expect(try WireCodec.decodeResponse(answer).status == 0)
    }
}
