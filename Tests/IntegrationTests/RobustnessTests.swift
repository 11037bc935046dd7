import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// A connection speaking raw bytes to the daemon, for inputs the client library never sends.
private struct RawPeer {
    let socket: UnixSocket

    init(_ d: RunningDaemon) throws {
        socket = try UnixSocket.connect(path: d.socketPath)
    }

    func close() { socket.close() }

    func send(_ bytes: [UInt8]) throws {
        try socket.writeAll(bytes)
    }

    /// Sends `payload` inside a well-formed frame.
    func sendFrame(_ payload: [UInt8]) throws {
        try socket.writeAll(Frame.encode(payload))
    }

    /// The next frame from the daemon decoded as a response, or nil when the daemon closed
    /// the connection. Fails (throws) if nothing happens within `timeoutMs`.
    func next(timeoutMs: Int32 = 5_000) throws -> Response? {
        guard let payload = try Frame.read(from: socket, idleTimeoutMs: timeoutMs, frameTimeoutMs: timeoutMs) else {
            return nil
        }
        return try WireCodec.decodeResponse(payload)
    }

    /// Waits for the daemon to close this connection and returns how long that took; records
    /// an issue if it answers instead or stays open past `timeoutMs`.
    @discardableResult
    func expectClosed(timeoutMs: Int32 = 5_000, sourceLocation: SourceLocation = #_sourceLocation) -> Double {
        let start = Date()
        do {
            if let response = try next(timeoutMs: timeoutMs) {
                Issue.record("expected the daemon to close the connection; it answered \(response)", sourceLocation: sourceLocation)
            }
        } catch {
            Issue.record("expected the daemon to close the connection; got \(error)", sourceLocation: sourceLocation)
        }
        return Date().timeIntervalSince(start)
    }
}

/// The item each robustness test adds before its bad input, and then reads back.
private let seededQuery: AttributeDictionary = [
    "class": .string("genp"), "svce": .string("robustness"), "acct": .string("seeded"),
]
private let seededSecret: [UInt8] = [0x00, 0xFF, 0x10, 0x80] + Array("seeded-secret".utf8) + [0x7F, 0x00]

/// A daemon holding the seeded item.
private func seededDaemon() throws -> RunningDaemon {
    let d = try RunningDaemon()
    try KeychainConnection(socketPath: d.socketPath).add(seededQuery.merging(["v_Data": .data(seededSecret)]) { $1 })
    return d
}

/// The daemon survived: still running, a fresh client is served, and the seeded item reads
/// back byte for byte.
private func expectStillServing(_ d: RunningDaemon, sourceLocation: SourceLocation = #_sourceLocation) throws {
    #expect(d.process?.isRunning == true, "keychaind died: \(d.log)", sourceLocation: sourceLocation)
    let fresh = KeychainConnection(socketPath: d.socketPath, timeoutMs: 5_000)
    #expect(try fresh.status()["state"] == .string("unlocked"), sourceLocation: sourceLocation)
    let found = try fresh.copyMatching(seededQuery.merging(["r_Data": .bool(true)]) { $1 })
    #expect(found == .single(.data(seededSecret)), sourceLocation: sourceLocation)
}

/// Waits (briefly) for the daemon to log a line containing `text`.
private func expectLogLine(_ d: RunningDaemon, containing text: String, sourceLocation: SourceLocation = #_sourceLocation) {
    let deadline = Date().addingTimeInterval(3)
    while Date() < deadline {
        if d.log.contains(text) { return }
        usleep(20_000)
    }
    Issue.record("the daemon log has no line containing \"\(text)\":\n\(d.log)", sourceLocation: sourceLocation)
}

/// A little-endian u32 frame header.
private func header(_ length: UInt32) -> [UInt8] {
    withUnsafeBytes(of: length.littleEndian) { Array($0) }
}

/// An add request's payload built by hand, so a value can have any type tag.
private func addPayload(_ entries: [(String, AttributeValue)], trailing: [UInt8] = []) -> [UInt8] {
    var w = ByteWriter()
    w.u8(WireCodec.version)
    w.u8(Request.Operation.add.rawValue)
    w.u32(UInt32(entries.count))
    for (key, value) in entries {
        w.u16(UInt16(key.utf8.count))
        w.raw(Array(key.utf8))
        AttributeCodec.encodeValue(value, into: &w)
    }
    w.raw(trailing)
    return w.bytes
}

private let secretMarker = "TOPSECRET-xyz"

@Suite("Daemon robustness against malformed and hostile input", .serialized)
struct RobustnessTests {
    @Test func truncatedFrameThenDisconnectLeavesTheDaemonServing() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        try peer.send(header(100) + [UInt8](repeating: 0x41, count: 10))
        peer.close()
        expectLogLine(d, containing: "mid-frame")
        try expectStillServing(d)
    }

    @Test func lengthHeaderOf0xFFFFFFFFClosesTheConnectionWithoutAllocating() throws {
        let d = try seededDaemon()
        let rssBefore = residentKilobytes(d.pid)
        try #require(rssBefore > 0, "cannot read the daemon's memory use")
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.send(header(0xFFFF_FFFF))
        peer.expectClosed()
        expectLogLine(d, containing: "frame length 4294967295")
        // A 4 GiB buffer would show (or kill the daemon); allow ordinary growth only.
        let rssAfter = residentKilobytes(d.pid)
        #expect(rssAfter - rssBefore < 64 * 1024, "RSS grew from \(rssBefore) KiB to \(rssAfter) KiB")
        try expectStillServing(d)
    }

    @Test func lengthHeaderOneOverTheLimitClosesTheConnection() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.send(header(UInt32(Frame.maxPayloadBytes + 1)))
        peer.expectClosed()
        expectLogLine(d, containing: "frame length \(Frame.maxPayloadBytes + 1)")
        try expectStillServing(d)
    }

    @Test func zeroLengthFrameClosesTheConnection() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.send(header(0))
        peer.expectClosed()
        expectLogLine(d, containing: "frame length 0 ")
        try expectStillServing(d)
    }

    @Test func randomGarbageIsAnsweredWithAnErrorOrClosed() throws {
        let d = try seededDaemon()
        var rng = SystemRandomNumberGenerator()
        let garbage = (0..<64).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let peer = try RawPeer(d)
        defer { peer.close() }
        try? peer.send(garbage)  // the daemon may close before taking it all
        // Every frame the daemon sends back must be an error, and it must end with a close.
        var answers = 0
        while let response = try peer.next(), answers < 64 {
            #expect(response.status != 0, "garbage \(garbage) was answered with success")
            answers += 1
        }
        expectLogLine(d, containing: "closing connection")
        try expectStillServing(d)
    }

    @Test func unknownOpcodeIsUnimplementedAndTheConnectionStaysUsable() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.sendFrame([WireCodec.version, 200])
        let refused = try #require(try peer.next())
        #expect(refused.status == -4)  // errSecUnimplemented
        #expect(refused.message.contains("200"))
        try peer.sendFrame(plainPayload(.status))
        let status = try #require(try peer.next(), "the connection was closed after an unknown opcode")
        #expect(status.status == 0)
        guard case .single(.attributes(let info)) = status.result else {
            Issue.record("status answered \(status.result)")
            return
        }
        #expect(info["state"] == .string("unlocked"))
        try expectStillServing(d)
    }

    @Test func wrongProtocolVersionIsErrSecParam() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        var payload = plainPayload(.status)
        payload[0] = 2
        try peer.sendFrame(payload)
        let response = try #require(try peer.next())
        #expect(response.status == -50)  // errSecParam
        #expect(response.message.contains("version"))
        expectLogLine(d, containing: "bad request")
        try expectStillServing(d)
    }

    @Test func classAsAnIntegerIsErrSecParamAndAddsNothing() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.sendFrame(addPayload([
            ("class", .int(1)), ("svce", .string("typed")), ("acct", .string("class-int")),
            ("v_Data", .data(bytes(secretMarker))),
        ]))
        let response = try #require(try peer.next())
        #expect(response.status == -50)
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.itemNotFound) {
            _ = try c.copyMatching(["class": .string("genp"), "svce": .string("typed"), "m_Limit": .string("m_LimitAll")])
        }
        try expectStillServing(d)
    }

    @Test func secretGivenAsAStringIsErrSecParamAndAddsNothing() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.sendFrame(addPayload([
            ("class", .string("genp")), ("svce", .string("typed")), ("acct", .string("data-string")),
            ("v_Data", .string(secretMarker)),
        ]))
        let response = try #require(try peer.next())
        #expect(response.status == -50)
        #expect(!response.message.contains(secretMarker))
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.itemNotFound) {
            _ = try c.copyMatching(["class": .string("genp"), "svce": .string("typed"), "m_Limit": .string("m_LimitAll")])
        }
        try expectStillServing(d)
    }

    @Test func trailingBytesAfterTheBodyAreErrSecParamAndAddNothing() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        try peer.sendFrame(addPayload([
            ("class", .string("genp")), ("svce", .string("typed")), ("acct", .string("trailing")),
            ("v_Data", .data(bytes(secretMarker))),
        ], trailing: [0xDE, 0xAD]))
        let response = try #require(try peer.next())
        #expect(response.status == -50)
        // A request without a body and trailing bytes too.
        try peer.sendFrame(plainPayload(.status) + [0])
        #expect(try #require(try peer.next()).status == -50)
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.itemNotFound) {
            _ = try c.copyMatching(["class": .string("genp"), "svce": .string("typed"), "m_Limit": .string("m_LimitAll")])
        }
        try expectStillServing(d)
    }

    @Test func silentClientIsClosedAfterTheIdleTimeoutWhileOthersAreServed() throws {
        let d = try seededDaemon()
        let silent = try RawPeer(d)
        defer { silent.close() }
        let start = Date()
        let other = KeychainConnection(socketPath: d.socketPath, timeoutMs: 30_000)
        var served = 0
        var closedAfter: Double?
        // Up to 30 s: the close must come, and with the log's reason; when is the lower
        // bound's question alone (no stall makes it early).
        while Date().timeIntervalSince(start) < 30 {
            // Another client is served while the silent one waits out its timeout.
            #expect(try other.status()["state"] == .string("unlocked"))
            served += 1
            var pfd = pollfd(fd: silent.socket.fd, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 100) > 0 {
                closedAfter = Date().timeIntervalSince(start)
                break
            }
        }
        let elapsed = try #require(closedAfter, "the silent client was not closed within 30 s")
        #expect(try silent.next(timeoutMs: 1_000) == nil, "the silent client's socket is readable but not at EOF")
        #expect(elapsed >= 1.5, "closed after \(elapsed) s: sooner than the 2 s idle timeout")
        // Every answer but the last was followed by a look that found the silent client still
        // open: at least one call was answered while it waited, not only after its close.
        #expect(served >= 2, "the other client was answered only after the silent one was closed")
        expectLogLine(d, containing: "timed out")
        try expectStillServing(d)
    }

    @Test func clientStalledMidFrameIsClosedAfterTheFrameTimeout() throws {
        let d = try seededDaemon()
        let peer = try RawPeer(d)
        defer { peer.close() }
        let payload = plainPayload(.status)
        let frame = Frame.encode(payload + [UInt8](repeating: 0, count: 40))  // claims 42 bytes
        try peer.send(Array(frame.prefix(10)))  // header and 6 payload bytes, then nothing
        // Closed at all within 30 s, with the log's reason below; only the lower bound is timed.
        let elapsed = peer.expectClosed(timeoutMs: 30_000)
        #expect(elapsed >= 0.5, "closed after \(elapsed) s: sooner than the 1 s frame timeout")
        expectLogLine(d, containing: "timed out")
        try expectStillServing(d)
    }

    @Test func secretsInMalformedRequestsNeverReachTheLog() throws {
        let d = try seededDaemon()
        let secret = bytes(secretMarker)
        let malformed: [[UInt8]] = [
            // Wrong version, otherwise a valid add.
            { var p = plainPayload(.add(["class": .string("genp"), "acct": .string("a"), "v_Data": .data(secret)]))
              p[0] = 9
              return p }(),
            // Trailing bytes.
            addPayload([("class", .string("genp")), ("acct", .string("b")), ("v_Data", .data(secret))], trailing: [1]),
            // The secret as a string value, and as a string under a key that must be a boolean.
            addPayload([("class", .string("genp")), ("acct", .string("c")), ("v_Data", .string(secretMarker))]),
            addPayload([("class", .string("genp")), ("acct", .string("d")), ("r_Data", .string(secretMarker))]),
            // An unknown attribute carrying the secret.
            addPayload([("class", .string("genp")), ("zzzz", .string(secretMarker))]),
            // The value cut short in the middle of the secret.
            Array(addPayload([("class", .string("genp")), ("v_Data", .data(secret))]).dropLast(4)),
            // A passcode call with the secret as passcode and trailing bytes.
            plainPayload(.unlock(passcode: secret)) + [0],
        ]
        let peer = try RawPeer(d)
        defer { peer.close() }
        for payload in malformed {
            try peer.sendFrame(payload)
            let response = try #require(try peer.next(), "closed after \(payload)")
            #expect(response.status != 0)
            #expect(!response.message.contains(secretMarker), "the answer echoes the secret: \(response.message)")
        }
        // A frame cut off inside the secret, then a hang-up.
        let cut = try RawPeer(d)
        try cut.send(Array(Frame.encode(addPayload([("class", .string("genp")), ("v_Data", .data(secret))])).dropLast(3)))
        cut.close()
        expectLogLine(d, containing: "mid-frame")
        expectLogLine(d, containing: "bad request")
        #expect(!d.log.contains(secretMarker))
        #expect(!d.log.contains(secret.map { String(format: "%02x", $0) }.joined()))  // as hex
        #expect(!d.log.contains(secret.map(String.init).joined(separator: ", ")))  // as a byte array
        try expectStillServing(d)
    }
}

/// VmRSS of a process in KiB (0 if unreadable).
private func residentKilobytes(_ pid: Int32) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
        return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
    return 0
}
