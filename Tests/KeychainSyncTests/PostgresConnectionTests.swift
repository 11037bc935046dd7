import Foundation
import KeychainModel
import KeychainSync
import Testing

@Suite("PostgresConnection: statements, transactions and errors against a real server")
struct PostgresConnectionTests {
    @Test func valuesRoundTripInBinaryExactly() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        try db.query("CREATE TABLE t (n int8, small integer, s text, b bytea, f boolean)")
        let everyByte = (0...255).map { UInt8($0) }
        let rows: [[PostgresValue]] = [
            [.int(Int64.min), .int(-1), .text("zürich ✓"), .bytea(everyByte), .bool(true)],
            [.int(Int64.max), .int(Int64(Int32.max)), .text(""), .bytea([]), .bool(false)],
            [.null, .null, .null, .null, .null],
        ]
        for row in rows {
            let inserted = try db.query("INSERT INTO t VALUES ($1, $2, $3, $4, $5)", row)
            #expect(inserted.affectedRows == 1)
        }
        let result = try db.query("SELECT n, small, s, b, f FROM t ORDER BY n NULLS LAST")
        #expect(result.columnNames == ["n", "small", "s", "b", "f"])
        #expect(result.rows == rows)
    }

    @Test func parametersAreNeverSQL() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        try db.query("CREATE TABLE t (s text)")
        let hostile = "x'); DROP TABLE t; --"
        try db.query("INSERT INTO t VALUES ($1)", [.text(hostile)])
        #expect(try db.query("SELECT s FROM t").rows == [[.text(hostile)]])
    }

    @Test func aTransactionThatThrowsLeavesNothing() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        try db.query("CREATE TABLE t (n int8)")
        expectError(.param) {
            try db.transaction { (tx) throws(KeychainError) in
                try tx.query("INSERT INTO t VALUES (1)")
                throw .param("the caller gives up")
            }
        }
        try db.transaction { (tx) throws(KeychainError) in try tx.query("INSERT INTO t VALUES (2)") }
        #expect(try db.query("SELECT n FROM t").rows == [[.int(2)]])
    }

    @Test func aTransactionWhoseStatementFailedIsNotCommittedEvenIfTheBodyGoesOn() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        try db.query("CREATE TABLE t (n int8 PRIMARY KEY)")
        expectError(.internal) {
            try db.transaction { (tx) throws(KeychainError) in
                try tx.query("INSERT INTO t VALUES (1)")
                _ = try? tx.query("INSERT INTO t VALUES (1)") // a duplicate, ignored by the body
            }
        }
        #expect(try db.query("SELECT count(*) FROM t").rows == [[.int(0)]])
    }

    @Test func serverErrorsMapToStatusAndLeaveTheConnectionUsable() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        try db.query("CREATE TABLE t (n int8 PRIMARY KEY)")
        try db.query("INSERT INTO t VALUES (1)")
        let duplicate = expectError(.duplicateItem) { try db.query("INSERT INTO t VALUES ($1)", [.int(1)]) }
        #expect((duplicate?.underlying as? PostgresFailure) == PostgresFailure(.server, sqlState: "23505"))
        expectError(.internal) { try db.query("SELEC 1") }
        #expect(try db.query("SELECT 1::int8").rows == [[.int(1)]])
    }

    @Test func aColumnOfAnUnreadTypeIsADecodeErrorNamingIt() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        let error = expectError(.decode) { try db.query("SELECT now() AS stamp") }
        #expect(error?.message.contains("stamp") == true)
    }

    @Test func aSlowStatementIsCancelledAtItsTimeoutAndTheConnectionStaysUsable() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        let start = ContinuousClock.now
        let error = expectError(.notAvailable) { try db.query("SELECT pg_sleep(30)", timeout: .milliseconds(300)) }
        #expect((error?.underlying as? PostgresFailure)?.kind == .timedOut)
        // Cancelled, not waited out: the statement alone would take 30 s.
        #expect(ContinuousClock.now - start < .seconds(25))
        #expect(db.isConnected)
        #expect(try db.query("SELECT 1::int8").rows == [[.int(1)]])
    }

    @Test func aCancellerStopsARunningStatementFromAnotherThread() throws {
        let cluster = try TestCluster()
        let db = try PostgresConnection(cluster.url)
        let canceller = try db.makeCanceller()
        let thread = Thread { Thread.sleep(forTimeInterval: 0.3); canceller.cancel() }
        let start = ContinuousClock.now
        thread.start()
        let error = expectError(.notAvailable) { try db.query("SELECT pg_sleep(30)") }
        #expect((error?.underlying as? PostgresFailure) == PostgresFailure(.server, sqlState: "57014"))
        // Cancelled, not waited out: the statement alone would take 30 s.
        #expect(ContinuousClock.now - start < .seconds(25))
        #expect(try db.query("SELECT 1::int8").rows == [[.int(1)]])
    }

    @Test func aWrongPasswordIsAuthFailedAndTheMessageDoesNotHoldIt() throws {
        let cluster = try TestCluster()
        let wrong = "Wrong-Secret-7f3a9c"
        let url = cluster.url.replacingOccurrences(of: cluster.password, with: wrong)
        let error = expectError(.authFailed) { _ = try PostgresConnection(url) }
        #expect(error?.message.contains("authentication failed") == true, "\(String(describing: error))")
        #expect(error?.message.contains(wrong) == false)
        #expect(error?.message.contains(cluster.password) == false)
    }

    @Test func aMalformedConnectionStringIsNotRepeatedInTheError() throws {
        // libpq's own message for this quotes the bad percent-escape, which lies in the password.
        let error = expectError(.param) { _ = try PostgresConnection("postgresql://keychaind:Secret%zzValue@127.0.0.1:1/k") }
        #expect(error?.message.contains("Secret") == false, "\(String(describing: error))")
        #expect((error?.underlying as? PostgresFailure)?.kind == .badConnectionString)
    }

    @Test func anUnreachableServerIsNotAvailable() throws {
        // Port 1 on loopback: nothing listens there, the connection is refused at once.
        let error = expectError(.notAvailable) { _ = try PostgresConnection("host=127.0.0.1 port=1 user=k password=Secret-42 dbname=k") }
        #expect((error?.underlying as? PostgresFailure)?.kind == .connect)
        #expect(error?.message.contains("Secret-42") == false)
    }

    /// The stop, signalled long after the 2 s timeout, only ends the wait if the timeout
    /// was not applied; the error says which of the two ended it.
    @Test func aHostThatNeverAnswersFailsAtTheConnectTimeout() throws {
        let silent = try SilentServer()
        let stop = try Wakeup()
        DispatchQueue.global().asyncAfter(deadline: .now() + 60) { stop.signal() }
        let start = ContinuousClock.now
        let error = expectError(.notAvailable) {
            _ = try PostgresConnection("host=127.0.0.1 port=\(silent.port) user=k dbname=k connect_timeout=2", stop: stop)
        }
        #expect((error?.underlying as? PostgresFailure)?.kind == .connect)
        #expect(error?.message.contains("port \(silent.port) failed: no answer within 2.0 s") == true, "\(String(describing: error))")
        #expect(error?.message.contains("asked to stop") == false, "\(String(describing: error))")
        // A lower bound only: no stall can make the wait shorter than the timeout.
        #expect(ContinuousClock.now - start >= .seconds(2))
    }

    @Test func withSeveralHostsOneThatNeverAnswersIsSkippedAfterItsTimeout() throws {
        let cluster = try TestCluster()
        let silent = try SilentServer()
        // postgresql://keychaind:PW@127.0.0.1:PORT/keychaind: the silent host first.
        let url = cluster.url.replacingOccurrences(of: "@127.0.0.1:", with: "@127.0.0.1:\(silent.port),127.0.0.1:") + "?connect_timeout=2"
        let db = try PostgresConnection(url)
        #expect(try db.query("SELECT 1::int8").rows == [[.int(1)]])
    }

    @Test func aConnectWaitingOnAHostThatNeverAnswersIsAbandonedWhenItsStopIsSignalled() throws {
        let silent = try SilentServer()
        let stop = try Wakeup()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) { stop.signal() }
        let error = expectError(.notAvailable) {
            _ = try PostgresConnection("host=127.0.0.1 port=\(silent.port) user=k dbname=k connect_timeout=60", stop: stop)
        }
        #expect((error?.underlying as? PostgresFailure)?.kind == .connect)
        // Ended by the stop, not by the 60 s connect timeout a connect deaf to it would wait out.
        #expect(error?.message.contains("asked to stop") == true, "\(String(describing: error))")
        #expect(error?.message.contains("no answer within") == false, "\(String(describing: error))")
    }
}
