#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore
import Logging
import Testing
@testable import KeychainServer

@Suite("Worker threads")
struct WorkerReuseTests {
    @Test func successiveConnectionsReuseWorkersInsteadOfStartingAThreadEach() throws {
        var template = Array("/tmp/kcw.XXXXXX".utf8CString)
        let root = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: root) }
        let configuration = ServerConfiguration(
            socketPath: root + "/s.sock",
            store: StoreConfiguration(stateDirectory: root + "/state", argon2: .testingOnly))
        let server = try KeychainServer(configuration: configuration, logger: Logger(label: "test"))
        let running = Thread { server.run() }
        running.start()
        defer { server.shutdown() }
        for _ in 0..<100 {
            let s = try UnixSocket.connect(path: configuration.socketPath)
            try s.writeAll(Frame.encode(WireCodec.encode(.status)))
            let answer = try #require(try Frame.read(from: s, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
            #expect(try WireCodec.decodeResponse(answer).status == 0)
            s.close()
        }
        // A thread per connection would have started 100; a worker that has not yet seen its
        // client go may make the next connection start one more, up to the idle limit.
        #expect(server.startedWorkers <= KeychainServer.spareAcceptors + KeychainServer.maximumIdleWorkers)
    }
}
