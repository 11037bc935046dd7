import Foundation
import KeychainClient
import KeychainModel
import Testing

/// The attack on op 47's exemption from the idle timeout: a process opens change subscriptions
/// and never reads them, to hold keychaind's connections and threads (docs/protocol.md, op 47).
@Suite("Change subscriptions are bounded per uid")
struct ChangeSubscriptionBoundTests {
    @Test func aSameUIDFloodOfSubscriptionsBeyondTheBoundIsRefusedAndOtherClientsAreStillServed() throws {
        let daemon = try RunningDaemon()
        let connection = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 30_000)
        var held: [ChangeSubscription] = []
        for _ in 0..<4 { held.append(try connection.subscribeToChanges()) }
        for _ in 0..<16 {
            #expect {
                _ = try connection.subscribeToChanges()
            } throws: { error in
                (error as? KeychainError)?.status == .allocate
            }
        }
        #expect(try connection.status()["state"] != nil)
        #expect(try daemon.cli(["list"]).status == 0)
        #expect(held.count == 4)
    }

    @Test func aClosedSubscriptionFreesItsPlace() throws {
        let daemon = try RunningDaemon()
        let connection = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 30_000)
        var held: [ChangeSubscription] = []
        for _ in 0..<4 { held.append(try connection.subscribeToChanges()) }
        held.removeLast()
        // The daemon notices the close on its own thread: the place comes back soon, not at once.
        try waitUntil(timeout: 20, "a closed subscription's place to be free") {
            guard let again = try? connection.subscribeToChanges() else { return false }
            held.append(again)
            return true
        }
        #expect(held.count == 4)
    }

    /// The exemption the bound pays for: a quiet subscriber is not closed for idleness.
    @Test func aSubscriptionOutlivesTheIdleTimeoutAndIsStillTold() throws {
        let daemon = try RunningDaemon(config: "idle_timeout_seconds = 1")
        #expect(try daemon.cli(["passcode", "set"], input: bytes("1234\n")).status == 0)
        let connection = KeychainConnection(socketPath: daemon.socketPath, timeoutMs: 30_000)
        let subscription = try connection.subscribeToChanges()
        // Past the idle timeout (a lower bound on the wait, not an upper one on the daemon).
        Thread.sleep(forTimeInterval: 2.5)
        #expect(try daemon.cli(["lock"]).status == 0)
        var toldLocked = false
        // A bound only so that a missing notice fails the test instead of hanging it.
        var ready = pollfd(fd: subscription.fileDescriptor, events: Int16(POLLIN), revents: 0)
        while !toldLocked, poll(&ready, 1, 20_000) == 1 {
            toldLocked = try subscription.read().contains { $0.kind == .lock && $0.locked }
        }
        #expect(toldLocked)
    }
}
