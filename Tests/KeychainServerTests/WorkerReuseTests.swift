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
            // Give the worker time to see its client go and wait in accept again: on a loaded
            // machine it may not have, and then the next connection rightly starts a worker.
            let deadline = ContinuousClock.now + .seconds(2)
            while server.waitingAcceptors < KeychainServer.spareAcceptors && ContinuousClock.now < deadline {
                usleep(1_000)
            }
        }
        // A thread per connection would have started 100.
        #expect(server.startedWorkers <= KeychainServer.spareAcceptors + 1)
    }
}
