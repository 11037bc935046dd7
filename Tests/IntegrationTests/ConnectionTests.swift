import Foundation
import KeychainModel
import KeychainProtocol
import Testing

/// One status call on `socket`; nil when the daemon closed the connection instead.
private func status(on socket: UnixSocket) throws -> Int32? {
    guard (try? socket.writeAll(Frame.encode(WireCodec.encode(.status)))) != nil,
          let answer = try? Frame.read(from: socket, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000) else { return nil }
    return try WireCodec.decodeResponse(answer).status
}

@Suite("Connections beyond the limit", .serialized)
struct ConnectionTests {
    @Test func aConnectionBeyondMaxConnectionsIsClosedAndTheOthersAreServed() throws {
        let d = try RunningDaemon(config: "max_connections = 4")
        var open: [UnixSocket] = []
        defer { for s in open { s.close() } }
        for _ in 0..<4 {
            let s = try UnixSocket.connect(path: d.socketPath)
            #expect(try status(on: s) == 0)
            open.append(s)
        }
        let refused = try UnixSocket.connect(path: d.socketPath)
        #expect(try status(on: refused) == nil)
        refused.close()
        for s in open { #expect(try status(on: s) == 0) }
        #expect(d.log.contains("every connection slot is taken"))
        // A place freed is a place taken.
        open.removeLast().close()
        var served = false
        for _ in 0..<50 where !served {  // the daemon notices the close when it next reads
            let s = try UnixSocket.connect(path: d.socketPath)
            served = try status(on: s) == 0
            if served { open.append(s) } else { s.close(); usleep(20_000) }
        }
        #expect(served)
    }
}
