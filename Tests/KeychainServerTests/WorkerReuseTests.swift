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

    /// A worker keeps one waiter (an epoll instance) for all its connections; the daemon's
    /// wake descriptor still ends every waiter's wait.
    @Test func oneWaiterAcceptsConnectionAfterConnectionAndEveryWaiterWakesForTheWakeDescriptor() throws {
        var template = Array("/tmp/kcw.XXXXXX".utf8CString)
        let root = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: root) }
        let listener = try UnixSocket.listen(path: root + "/s.sock", mode: 0o600)
        defer { listener.close() }
        try listener.setNonBlocking()
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let first = try ConnectionWaiter(listener: listener, wake: ends[0])
        let second = try ConnectionWaiter(listener: listener, wake: ends[0])
        for _ in 0..<3 {
            let client = try UnixSocket.connect(path: root + "/s.sock")
            let accepted = try #require(try listener.accept(waitingIn: first))
            accepted.close()
            client.close()
        }
        var byte: UInt8 = 1
        #expect(write(ends[1], &byte, 1) == 1)
        #expect(try listener.accept(waitingIn: first) == nil)
        #expect(try listener.accept(waitingIn: second) == nil)
    }
}
