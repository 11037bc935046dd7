import Foundation
import KeychainModel
import KeychainSync
import Testing

/// LISTEN/NOTIFY and the wait that the sync thread blocks in (docs/sync.md §7.1, §7.2).
@Suite("PostgresConnection: notifications, the wake-up and a server that restarts")
struct PostgresNotificationTests {
    static let channel = "keychaind_sync_00112233445566778899aabbccddeeff"

    /// The wait ends with the notification, not at its own time-out (which would be `.timedOut`).
    @Test func aNotifyFromAnotherConnectionEndsTheWait() throws {
        let cluster = try TestCluster()
        let listener = try PostgresConnection(cluster.url)
        let writer = try PostgresConnection(cluster.url)
        try listener.listen(Self.channel)
        try writer.notify(Self.channel, payload: "42")
        let outcome = try listener.waitForNotifications(timeout: .seconds(60))
        #expect(outcome == .notified([PostgresNotification(channel: Self.channel, payload: "42", senderProcessID: writer.serverProcessID)]))
    }

    @Test func aNotifyInsideATransactionArrivesOnlyAtCommit() throws {
        let cluster = try TestCluster()
        let listener = try PostgresConnection(cluster.url)
        let writer = try PostgresConnection(cluster.url)
        try listener.listen(Self.channel)
        try writer.query("BEGIN")
        try writer.notify(Self.channel, payload: "7")
        #expect(try listener.waitForNotifications(timeout: .milliseconds(200)) == .timedOut)
        try writer.query("COMMIT")
        #expect(try listener.waitForNotifications(timeout: .seconds(5)) == .notified([
            PostgresNotification(channel: Self.channel, payload: "7", senderProcessID: writer.serverProcessID),
        ]))
    }

    @Test func aNotificationThatArrivedDuringAStatementIsNotLost() throws {
        let cluster = try TestCluster()
        let listener = try PostgresConnection(cluster.url)
        let writer = try PostgresConnection(cluster.url)
        try listener.listen(Self.channel)
        try writer.notify(Self.channel, payload: "1")
        // The notification reaches the listener's socket while it runs a statement of its own.
        try listener.query("SELECT pg_sleep(0.2)")
        #expect(try listener.waitForNotifications(timeout: .milliseconds(100)) == .notified([
            PostgresNotification(channel: Self.channel, payload: "1", senderProcessID: writer.serverProcessID),
        ]))
    }

    @Test func theWakeupEndsTheWaitAndASignalBeforeTheWaitIsKept() throws {
        let cluster = try TestCluster()
        let listener = try PostgresConnection(cluster.url)
        try listener.listen(Self.channel)
        let wakeup = try Wakeup()
        #expect(try listener.waitForNotifications(wakeup: wakeup, timeout: .milliseconds(100)) == .timedOut)
        wakeup.signal()
        wakeup.signal()
        #expect(try listener.waitForNotifications(wakeup: wakeup, timeout: .seconds(5)) == .woken)
        // Two signals wake once.
        #expect(try listener.waitForNotifications(wakeup: wakeup, timeout: .milliseconds(100)) == .timedOut)

        // Signalled during the wait: it ends woken, not timed out.
        let thread = Thread { Thread.sleep(forTimeInterval: 0.1); wakeup.signal() }
        thread.start()
        #expect(try listener.waitForNotifications(wakeup: wakeup, timeout: .seconds(60)) == .woken)
    }

    @Test func aChannelThatLISTENWouldFoldIsRefused() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        expectError(.param) { try db.listen("Keychaind_Sync") }
        expectError(.param) { try db.listen("a; DROP TABLE x") }
        expectError(.param) { try db.notify(String(repeating: "a", count: 64), payload: "") }
    }

    @Test func aServerCrashIsReportedAsConnectionLostAndANewConnectionListensAgain() throws {
        let cluster = try TestCluster()
        let listener = try PostgresConnection(cluster.url)
        try listener.listen(Self.channel)

        try cluster.halt()
        // Noticed while waiting: the wait ends with the loss, not at its time-out (no error).
        let lost = expectError(.notAvailable) { _ = try listener.waitForNotifications(timeout: .seconds(60)) }
        #expect((lost?.underlying as? PostgresFailure)?.kind == .connectionLost, "\(String(describing: lost))")
        #expect(!listener.isConnected)
        // Closed for good: every later call says so at once.
        let after = expectError(.notAvailable) { try listener.query("SELECT 1::int8") }
        #expect((after?.underlying as? PostgresFailure)?.kind == .connectionLost)
        // While the server is down, connecting fails as not available (the loop's backoff case).
        expectError(.notAvailable) { _ = try PostgresConnection(cluster.url) }

        try cluster.resume()
        let again = try PostgresConnection(cluster.url)
        try again.listen(Self.channel)
        let writer = try PostgresConnection(cluster.url)
        try writer.notify(Self.channel, payload: "after restart")
        #expect(try again.waitForNotifications(timeout: .seconds(5)) == .notified([
            PostgresNotification(channel: Self.channel, payload: "after restart", senderProcessID: writer.serverProcessID),
        ]))
    }

    @Test func aStatementOnAConnectionWhoseServerCrashedIsConnectionLost() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        try cluster.halt()
        let lost = expectError(.notAvailable) { try db.query("SELECT 1::int8") }
        #expect((lost?.underlying as? PostgresFailure)?.kind == .connectionLost, "\(String(describing: lost))")
        #expect(!db.isConnected)
    }
}
