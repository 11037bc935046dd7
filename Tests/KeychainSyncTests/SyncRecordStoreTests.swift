import Foundation
import KeychainCrypto
import KeychainModel
import KeychainSync
import Synchronization
import Testing

/// A circle in a fresh cluster, and rows and heads to push into it.
struct RecordStoreFixture {
    let cluster: TestCluster
    let db: SyncDatabase
    let circle: SyncCircleID
    static let alice = try! SyncDeviceID(Array(repeating: 0x0A, count: 16))
    static let bob = try! SyncDeviceID(Array(repeating: 0x0B, count: 16))

    init() throws {
        cluster = try TestCluster()
        db = SyncDatabase(try PostgresConnection(cluster.url))
        try db.createSchema()
        circle = SyncCircleID.random()
        try db.connection.query("INSERT INTO sync_circles (circle_id, epoch) VALUES ($1, 1)", [.bytea(circle.bytes)])
    }

    /// Another connection to the same database (another device).
    func peer() throws -> SyncDatabase { SyncDatabase(try PostgresConnection(cluster.url)) }

    static func recordID(_ n: Int) -> [UInt8] {
        withUnsafeBytes(of: UInt64(n).bigEndian) { Array($0) } + Array(repeating: 0xEE, count: 24)
    }

    static func row(_ n: Int, mdat: Int64, writer: SyncDeviceID = alice, counter: Int64, epoch: UInt32 = 1,
                    tombstone: Bool = false) -> SyncRecordRow {
        SyncRecordRow(recordID: recordID(n), epoch: epoch, version: SyncVersion(mdat: mdat, writer: writer, counter: counter),
                      tombstone: tombstone, body: Array("body \(n) \(mdat) \(counter)".utf8))
    }

    func head(_ device: SyncDeviceID = alice, counter: Int64, rosterLength: UInt32 = 1, epoch: UInt32 = 1) -> SyncHead {
        Self.head(circle: circle, device, counter: counter, rosterLength: rosterLength, epoch: epoch)
    }

    /// A head whose signature nobody checks here: the store keeps heads, devices verify them.
    static func head(circle: SyncCircleID, _ device: SyncDeviceID = alice, counter: Int64, rosterLength: UInt32 = 1,
                     epoch: UInt32 = 1) -> SyncHead {
        SyncHead(circleID: circle, epoch: epoch, device: device, counter: counter, rosterLength: rosterLength,
                 rosterHash: Array(repeating: 0x33, count: 32), signature: Array(repeating: 0x44, count: 64))
    }

    func expectState(epoch: UInt32, seq: Int64, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let state = try db.circleState(circleID: circle)
        #expect(state?.epoch == epoch && state?.seq == seq, "\(String(describing: state))", sourceLocation: sourceLocation)
    }

    /// Every row of the circle, in seq order.
    func all(_ on: SyncDatabase? = nil) throws -> [SyncRecordRow] {
        try (on ?? db).pull(circleID: circle, after: 0, limit: 100_000).rows
    }

    func push(_ rows: [SyncRecordRow], counter: Int64? = nil, on: SyncDatabase? = nil, writer: SyncDeviceID = alice) throws -> SyncPushOutcome {
        try (on ?? db).push(circleID: circle, epoch: 1, rows: rows,
                            head: head(writer, counter: counter ?? rows.map(\.version.counter).max() ?? 0))
    }
}

/// Values that test threads share.
final class Shared<Value: Sendable>: Sendable {
    private let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
    func update(_ body: (inout Value) -> Void) { value.withLock { body(&$0) } }
    var current: Value { value.withLock { $0 } }
}

/// The median of some durations, in milliseconds, for the test log.
func medianMilliseconds(_ samples: [Duration]) -> String {
    guard !samples.isEmpty else { return "-" }
    let sorted = samples.sorted()
    let (s, a) = sorted[sorted.count / 2].components
    return String(format: "%.2f ms", Double(s) * 1000 + Double(a) / 1e15)
}

@Suite("SyncDatabase: pushing and pulling records (docs/sync.md 5, 6, 7.1)")
struct SyncRecordStoreTests {
    typealias F = RecordStoreFixture

    @Test func aGreaterVersionReplacesTheStoredRowUnderANewSeq() throws {
        let f = try F()
        #expect(try f.push([F.row(1, mdat: 100, counter: 1)]) == .pushed(lastSeq: 1, lost: []))
        let newer = F.row(1, mdat: 200, writer: F.bob, counter: 1)
        #expect(try f.push([newer], on: try f.peer(), writer: F.bob) == .pushed(lastSeq: 2, lost: []))
        var expected = newer
        expected.seq = 2
        #expect(try f.all() == [expected])
    }

    @Test func anOlderVersionLosesAndIsReportedLost() throws {
        let f = try F()
        let stored = F.row(1, mdat: 200, counter: 1)
        _ = try f.push([stored])
        let older = F.row(1, mdat: 100, writer: F.bob, counter: 7)
        #expect(try f.push([older], on: try f.peer(), writer: F.bob) == .pushed(lastSeq: 2, lost: [F.recordID(1)]))
        var expected = stored
        expected.seq = 1
        #expect(try f.all() == [expected])
    }

    @Test func equalMdatsFallToTheWritersBytes() throws {
        let f = try F()
        let bobs = F.row(1, mdat: 100, writer: F.bob, counter: 1)
        _ = try f.push([bobs], writer: F.bob)
        // Alice's id (0x0A...) is below Bob's (0x0B...): hers loses however high her counter.
        let alices = F.row(1, mdat: 100, writer: F.alice, counter: 999)
        #expect(try f.push([alices]) == .pushed(lastSeq: 2, lost: [F.recordID(1)]))
        #expect(try f.all().map(\.version) == [bobs.version])

        // The other way round in a second record: Bob's wins over Alice's.
        _ = try f.push([F.row(2, mdat: 100, writer: F.alice, counter: 1000)])
        #expect(try f.push([F.row(2, mdat: 100, writer: F.bob, counter: 2)], writer: F.bob) == .pushed(lastSeq: 4, lost: []))
        #expect(try f.all().first { $0.recordID == F.recordID(2) }?.version.writer == F.bob)
    }

    @Test func aPushRetriedAfterALostAcknowledgementChangesNothingAndSucceeds() throws {
        let f = try F()
        let rows = (1...3).map { F.row($0, mdat: 100, counter: Int64($0)) }
        #expect(try f.push(rows) == .pushed(lastSeq: 3, lost: []))
        let before = try f.all()
        // The client never saw the COMMIT's answer and pushes again: the store holds exactly its tuples.
        #expect(try f.push(rows) == .pushed(lastSeq: 6, lost: []))
        #expect(try f.all() == before)
    }

    @Test func seqsAreHandedOutInRowOrder() throws {
        let f = try F()
        let rows = [F.row(9, mdat: 5, counter: 1), F.row(3, mdat: 5, counter: 2), F.row(7, mdat: 5, counter: 3)]
        #expect(try f.push(rows) == .pushed(lastSeq: 3, lost: []))
        #expect(try f.all().map(\.recordID) == rows.map(\.recordID))
        #expect(try f.all().map(\.seq) == [1, 2, 3])
        try f.expectState(epoch: 1, seq: 3)
    }

    @Test func twoConcurrentWritersCommitInSeqOrderAndAPullAfterACursorNeverSkips() throws {
        let f = try F()
        let perWriter = 150
        let writersDone = Shared(0)
        let failures = Shared<[String]>([])
        let pushTimes = Shared<[Duration]>([])
        let (url, circle) = (f.cluster.url, f.circle)
        var threads: [Thread] = []
        for (w, writer) in [F.alice, F.bob].enumerated() {
            threads.append(Thread {
                defer { writersDone.update { $0 += 1 } }
                do {
                    let db = SyncDatabase(try PostgresConnection(url))
                    for i in 0..<perWriter {
                        let start = ContinuousClock.now
                        _ = try db.push(circleID: circle, epoch: 1, rows: [F.row(w * 10_000 + i, mdat: 100, writer: writer, counter: Int64(i + 1))],
                                        head: F.head(circle: circle, writer, counter: Int64(i + 1)))
                        let elapsed = ContinuousClock.now - start
                        pushTimes.update { $0.append(elapsed) }
                    }
                } catch {
                    failures.update { $0.append("\(error)") }
                }
            })
        }
        threads.forEach { $0.start() }

        // A reader pulling by cursor while both write: what it has seen must be every row in the end.
        let reader = try f.peer()
        var cursor: Int64 = 0
        var seen: [[UInt8]] = []
        var seqs: [Int64] = []
        while true {
            let finished = writersDone.current == 2
            let batch = try reader.pull(circleID: f.circle, after: cursor, limit: 7)
            seen += batch.rows.map(\.recordID)
            seqs += batch.rows.map(\.seq)
            cursor = batch.lastSeq
            if finished && batch.reachedEnd { break }
        }
        #expect(failures.current == [])
        #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)
        let all = Set((0..<perWriter).map { F.recordID($0) } + (0..<perWriter).map { F.recordID(10_000 + $0) })
        #expect(seen.count == 2 * perWriter)
        #expect(all.subtracting(seen).isEmpty, "\(all.subtracting(seen).count) rows never seen by the reader")
        print("SyncRecordStoreTests: single-row push transaction, two writers at once, median \(medianMilliseconds(pushTimes.current)) over \(2 * perWriter)")
    }

    @Test func aPushAfterTheEpochMovedWritesNothing() throws {
        let f = try F()
        _ = try f.push([F.row(1, mdat: 1, counter: 1)])
        try f.db.connection.query("UPDATE sync_circles SET epoch = 2 WHERE circle_id = $1", [.bytea(f.circle.bytes)])
        #expect(try f.push([F.row(2, mdat: 1, counter: 2)], counter: 2) == .epochMoved(current: 2))
        #expect(try f.all().map(\.recordID) == [F.recordID(1)])
        try f.expectState(epoch: 2, seq: 1)
        #expect(try f.db.heads(circleID: f.circle).map(\.counter) == [1])
    }

    @Test func rowsOfAnotherEpochAreRefusedBeforeAnythingIsSent() throws {
        let f = try F()
        expectError(.param) {
            _ = try f.push([F.row(1, mdat: 1, counter: 1), F.row(2, mdat: 1, counter: 2, epoch: 2)])
        }
        var shortID = F.row(3, mdat: 1, counter: 3)
        shortID.recordID.removeLast()
        expectError(.param) { _ = try f.push([shortID]) }
        #expect(try f.all() == [])
        try f.expectState(epoch: 1, seq: 0)
    }

    @Test func aPushTo1200RowsIsThreeTransactionsAndEveryRowArrives() throws {
        let f = try F()
        let listener = try PostgresConnection(f.cluster.url)
        try listener.listen(SyncDatabase.channel(circleID: f.circle.bytes))
        let rows = (1...1200).map { F.row($0, mdat: 10, counter: Int64($0)) }
        #expect(try f.push(rows) == .pushed(lastSeq: 1200, lost: []))
        #expect(try f.all().map(\.recordID) == rows.map(\.recordID))
        // One notification per transaction, each with its last seq; and three inserting transactions.
        var payloads: [String] = []
        while case .notified(let list) = try listener.waitForNotifications(timeout: .milliseconds(500)) {
            payloads += list.map(\.payload)
        }
        #expect(payloads == ["500", "1000", "1200"])
        #expect(try f.db.connection.query("SELECT count(DISTINCT xmin::text)::int8 FROM sync_records").rows == [[.int(3)]])
    }

    @Test func aNotifyReachesAListenerWithTheLastSeqAtCommit() throws {
        let f = try F()
        let listener = try PostgresConnection(f.cluster.url)
        try listener.listen(SyncDatabase.channel(circleID: f.circle.bytes))
        var pushTimes: [Duration] = []
        var arrivals: [Duration] = []
        for i in 1...30 {
            let start = ContinuousClock.now
            let rows = [F.row(2 * i, mdat: 1, counter: Int64(2 * i - 1)), F.row(2 * i + 1, mdat: 1, counter: Int64(2 * i))]
            #expect(try f.push(rows) == .pushed(lastSeq: Int64(2 * i), lost: []))
            pushTimes.append(ContinuousClock.now - start)
            let outcome = try listener.waitForNotifications(timeout: .seconds(2))
            arrivals.append(ContinuousClock.now - start)
            #expect(outcome == .notified([PostgresNotification(channel: SyncDatabase.channel(circleID: f.circle.bytes),
                                                                 payload: String(2 * i), senderProcessID: f.db.connection.serverProcessID)]))
        }
        // A push that writes nothing (a retry) wakes nobody.
        _ = try f.push([F.row(2, mdat: 1, counter: 1)], counter: 60)
        #expect(try listener.waitForNotifications(timeout: .milliseconds(200)) == .timedOut)
        print("SyncRecordStoreTests: two-row push transaction median \(medianMilliseconds(pushTimes)); push start to notification received median \(medianMilliseconds(arrivals)) (30 pushes)")
    }

    @Test func theHeadIsStoredAndNeverLowered() throws {
        let f = try F()
        _ = try f.push([F.row(1, mdat: 1, counter: 5)], counter: 5)
        _ = try f.push([], counter: 0, on: try f.peer(), writer: F.bob)
        #expect(try f.db.heads(circleID: f.circle) == [f.head(F.alice, counter: 5), f.head(F.bob, counter: 0)])
        // A longer roster at the same counter goes in (a device that verified new entries).
        _ = try f.db.push(circleID: f.circle, epoch: 1, rows: [], head: f.head(counter: 5, rosterLength: 2))
        #expect(try f.db.heads(circleID: f.circle).first?.rosterLength == 2)

        // A head below the stored one: refused, and the rows of its transaction with it.
        let refused = expectError(.param) { _ = try f.push([F.row(2, mdat: 1, counter: 3)], counter: 3) }
        #expect(refused?.message.contains("went back") == true)
        expectError(.param) { _ = try f.db.push(circleID: f.circle, epoch: 1, rows: [], head: f.head(counter: 6, rosterLength: 1)) }
        #expect(try f.all().map(\.recordID) == [F.recordID(1)])
        #expect(try f.db.heads(circleID: f.circle).first == f.head(F.alice, counter: 5, rosterLength: 2))
    }

    @Test func aCircleTheStoreDoesNotHaveIsNotFound() throws {
        let f = try F()
        let other = SyncCircleID.random()
        #expect(try f.db.circleState(circleID: other) == nil)
        expectError(.itemNotFound) {
            _ = try f.db.push(circleID: other, epoch: 1, rows: [F.row(1, mdat: 1, counter: 1, epoch: 1)],
                              head: SyncHead(circleID: other, epoch: 1, device: F.alice, counter: 1, rosterLength: 1,
                                             rosterHash: Array(repeating: 0, count: 32), signature: Array(repeating: 0, count: 64)))
        }
        #expect(try f.db.heads(circleID: other) == [])
        #expect(try f.db.pull(circleID: other, after: 0, limit: 10) == SyncPullBatch(rows: [], malformed: 0, lastSeq: 0, reachedEnd: true))
    }

    @Test func aPullReturnsAtMostItsLimitAndSaysWhenItReachedTheEnd() throws {
        let f = try F()
        _ = try f.push((1...5).map { F.row($0, mdat: 1, counter: Int64($0)) })
        let first = try f.db.pull(circleID: f.circle, after: 0, limit: 2)
        #expect(first.rows.map(\.seq) == [1, 2] && first.lastSeq == 2 && !first.reachedEnd)
        let rest = try f.db.pull(circleID: f.circle, after: first.lastSeq, limit: 5)
        #expect(rest.rows.map(\.seq) == [3, 4, 5] && rest.lastSeq == 5 && rest.reachedEnd)
        expectError(.param) { _ = try f.db.pull(circleID: f.circle, after: 0, limit: 0) }
    }

    @Test func aRowEditedIntoAnotherShapeIsSkippedCountedAndPassedByTheCursor() throws {
        let f = try F()
        _ = try f.push((1...4).map { F.row($0, mdat: 1, counter: Int64($0)) })
        // What the devices' pushes never write, done behind their back by whoever owns the tables.
        let c = f.db.connection
        try c.query("UPDATE sync_records SET epoch = 0 WHERE seq = 2")
        try c.query("ALTER TABLE sync_records DROP CONSTRAINT sync_records_writer_check")
        try c.query("UPDATE sync_records SET writer = '\\x0102'::bytea WHERE seq = 4")
        let batch = try f.db.pull(circleID: f.circle, after: 0, limit: 10)
        #expect(batch.rows.map(\.seq) == [1, 3])
        #expect(batch.malformed == 2)
        #expect(batch.lastSeq == 4 && batch.reachedEnd)

        try c.query("UPDATE sync_heads SET roster_len = -1")
        #expect(try f.db.heads(circleID: f.circle) == [])
    }

    @Test func expiryDeletesOnlyTombstonesOlderThanTheGivenMdat() throws {
        let f = try F()
        _ = try f.push([
            F.row(1, mdat: 100, counter: 1, tombstone: true),
            F.row(2, mdat: 300, counter: 2, tombstone: true),
            F.row(3, mdat: 100, counter: 3),
        ])
        #expect(try f.db.expireTombstones(circleID: f.circle, olderThan: 200) == 1)
        #expect(try f.all().map(\.recordID) == [F.recordID(2), F.recordID(3)])
        #expect(try f.db.expireTombstones(circleID: f.circle, olderThan: 200) == 0)
    }
}
