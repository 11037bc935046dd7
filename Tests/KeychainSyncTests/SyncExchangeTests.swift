import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainSync
import Testing
@testable import KeychainStore
import StoreTestSupport

/// Two keychains of one circle exchanging sealed rows in memory (docs/sync.md, 5 to 7): what
/// one device's change becomes on the other, how conflicts settle, and what is refused. No
/// network: the store is a MemoryRecordStore with PostgreSQL's upsert rule.
@Suite("Sync exchange")
struct SyncExchangeTests {
    let scope = SyncPair.scope

    // MARK: add, update, delete

    @Test func anItemAddedOnAIsOnBWithTheSameAttributesAndSecret() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct", ["labl": .string("L"), "desc": .string("D"), "v_Data": .data(bytes("s3cret"))]))
        try p.push(p.a)
        let report = try p.pull(p.b)
        #expect(report == SyncApplyReport(applied: 1))
        let onA = try p.item(p.a, genp("svc", "acct"))
        let onB = try p.item(p.b, genp("svc", "acct"))
        #expect(onA != nil && onB == onA)
        #expect(try p.b.secret(syncedGenp("svc", "acct")) == bytes("s3cret"))
    }

    /// An internet password, a certificate and a generated key: each class's attributes as
    /// the store fills them in travel and are stored alike on B.
    @Test func everyStoredClassArrivesWithTheSameAttributes() throws {
        let p = try SyncPair()
        let inet: AttributeDictionary = ["class": .string("inet"), "srvr": .string("example.com"), "acct": .string("me"),
                                         "ptcl": .string("htps"), "port": .int(443), "sync": .int(1), "v_Data": .data([1])]
        let cert: AttributeDictionary = ["class": .string("cert"), "sync": .int(1), "v_Data": .data(p256CertificateDER)]
        try p.a.add(inet)
        try p.a.add(cert)
        _ = try p.a.store.keys.generateKey(["type": .int(KeyType.ed25519.attributeNumber), "labl": .string("k"), "sync": .int(1)],
                                      scope: scope)
        try p.push(p.a)
        #expect(try p.pull(p.b) == SyncApplyReport(applied: 3))
        for query: AttributeDictionary in [["class": .string("inet")], ["class": .string("cert")], ["class": .string("keys")]] {
            let onA = try p.item(p.a, query)
            let onB = try p.item(p.b, query)
            #expect(onA != nil && onA == onB, "\(query)")
        }
    }

    @Test func anUpdateOnAReplacesTheItemOnB() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct", ["v_Data": .data([1])]))
        try p.exchange(first: p.a, then: p.b)
        p.a.clock.now += 10
        try p.a.store.items.update(syncedGenp("svc", "acct"), changes: ["labl": .string("new"), "v_Data": .data([2])], scope: scope)
        try p.push(p.a)
        #expect(try p.pull(p.b).applied == 1)
        #expect(try p.b.secret(syncedGenp("svc", "acct")) == [2])
        #expect(try p.item(p.b, genp("svc", "acct")) == p.item(p.a, genp("svc", "acct")))
        #expect(try p.b.count(syncedGenp("svc", "acct")) == 1)
    }

    @Test func aDeleteOnARemovesTheItemFromB() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct"))
        try p.exchange(first: p.a, then: p.b)
        p.a.clock.now += 10
        try p.a.store.items.delete(syncedGenp("svc", "acct"), scope: scope)
        let sent = try p.push(p.a)
        #expect(sent.count == 1 && sent[0].row.tombstone)
        #expect(try p.pull(p.b).applied == 1)
        #expect(try p.item(p.b, genp("svc", "acct")) == nil)
        #expect(try p.outbox(p.b).isEmpty)  // a pulled delete queues no tombstone of its own
    }

    @Test func anAppliedBatchQueuesNothingAndCountsOneTransaction() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "one"))
        try p.a.add(syncedGenp("svc", "two"))
        try p.push(p.a)
        let before = try p.b.store.generation()
        #expect(try p.pull(p.b).applied == 2)
        #expect(try p.b.store.generation() == before + 1)
        #expect(try p.outbox(p.b).isEmpty)
        #expect(try p.outgoing(p.b).isEmpty)
    }

    /// Each transaction moves the generation, which the Secret Service bridge reports as a
    /// change: a sync pass that changes nothing must commit nothing.
    @Test func idlePushesAndPullsCommitNothing() throws {
        let p = try SyncPair()
        try p.a.store.setPasscode([1, 2, 3])
        try p.b.store.setPasscode([1, 2, 3])
        try p.a.add(syncedGenp("svc", "ak"))
        try p.push(p.a)
        p.b.store.lock()
        try p.pull(p.b)  // deferred to the inbox
        try p.a.add(syncedGenp("svc", "later"))
        p.a.store.lock()  // so it waits for A's unlock
        let generations = { () throws -> [Int64] in [try p.a.store.generation(), try p.b.store.generation()] }
        let before = try generations()
        #expect(try p.push(p.a).isEmpty)
        #expect(try p.pull(p.b) == SyncApplyReport())
        #expect(try PulledRows(p.b.store.replica).applyInbox(circleKey: p.circleKey, writer: p.idB) == SyncApplyReport(deferred: 1))
        #expect(try generations() == before)
    }

    // MARK: conflicts

    /// Both change the item while apart; B's change is the later one and wins everywhere,
    /// whichever device reaches the store first.
    @Test(arguments: [true, false])
    func concurrentUpdatesConvergeOnTheGreaterTuple(aFirst: Bool) throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct", ["v_Data": .data([0])]))
        try p.exchange(first: p.a, then: p.b)
        p.a.clock.now += 10
        p.b.clock.now += 20
        try p.a.store.items.update(syncedGenp("svc", "acct"), changes: ["labl": .string("A"), "v_Data": .data([1])], scope: scope)
        try p.b.store.items.update(syncedGenp("svc", "acct"), changes: ["labl": .string("B"), "v_Data": .data([2])], scope: scope)
        try aFirst ? p.exchange(first: p.a, then: p.b) : p.exchange(first: p.b, then: p.a)
        for t in [p.a, p.b] {
            #expect(try p.item(t, genp("svc", "acct"))?["labl"] == .string("B"))
            #expect(try t.secret(syncedGenp("svc", "acct")) == [2])
            #expect(try p.outbox(t).isEmpty)
        }
        #expect(try p.item(p.a, genp("svc", "acct")) == p.item(p.b, genp("svc", "acct")))
    }

    /// A deletes, B updates later: the update resurrects the item on both, in either order.
    @Test(arguments: [true, false])
    func aNewerUpdateBeatsAnOlderDelete(aFirst: Bool) throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct", ["v_Data": .data([0])]))
        try p.exchange(first: p.a, then: p.b)
        p.a.clock.now += 10
        p.b.clock.now += 20
        try p.a.store.items.delete(syncedGenp("svc", "acct"), scope: scope)
        try p.b.store.items.update(syncedGenp("svc", "acct"), changes: ["v_Data": .data([2])], scope: scope)
        try aFirst ? p.exchange(first: p.a, then: p.b) : p.exchange(first: p.b, then: p.a)
        for t in [p.a, p.b] {
            #expect(try t.secret(syncedGenp("svc", "acct")) == [2])
            #expect(try p.outbox(t).isEmpty)
        }
        #expect(try p.item(p.a, genp("svc", "acct")) == p.item(p.b, genp("svc", "acct")))
    }

    /// B updates, A deletes later: the delete removes the item on both, in either order.
    @Test(arguments: [true, false])
    func aNewerDeleteBeatsAnOlderUpdate(aFirst: Bool) throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct", ["v_Data": .data([0])]))
        try p.exchange(first: p.a, then: p.b)
        p.b.clock.now += 10
        p.a.clock.now += 20
        try p.b.store.items.update(syncedGenp("svc", "acct"), changes: ["v_Data": .data([2])], scope: scope)
        try p.a.store.items.delete(syncedGenp("svc", "acct"), scope: scope)
        try aFirst ? p.exchange(first: p.a, then: p.b) : p.exchange(first: p.b, then: p.a)
        for t in [p.a, p.b] {
            #expect(try p.item(t, genp("svc", "acct")) == nil)
            #expect(try p.outbox(t).isEmpty)
        }
    }

    /// A deleted here (its tombstone not pushed yet) when B's older update arrives: the item
    /// stays deleted, and the tombstone stays queued to win in the store too.
    @Test func anOlderPulledVersionDoesNotResurrectAnItemDeletedHereAndNotYetPushed() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct"))
        try p.exchange(first: p.a, then: p.b)
        p.b.clock.now += 10
        p.a.clock.now += 20
        try p.b.store.items.update(syncedGenp("svc", "acct"), changes: ["v_Data": .data([2])], scope: scope)
        try p.a.store.items.delete(syncedGenp("svc", "acct"), scope: scope)
        try p.push(p.b)
        #expect(try p.pull(p.a) == SyncApplyReport(superseded: 1))
        #expect(try p.item(p.a, genp("svc", "acct")) == nil)
        #expect(try p.outgoing(p.a).map(\.row.tombstone) == [true])
    }

    // MARK: what is refused

    enum Tampering: CaseIterable { case body, recordID, version, epoch }

    @Test(arguments: Tampering.allCases)
    func anAlteredRowIsRejectedAndChangesNothing(_ tampering: Tampering) throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct", ["v_Data": .data([1])]))
        try p.a.add(syncedGenp("svc", "other", ["v_Data": .data([9])]))
        try p.exchange(first: p.a, then: p.b)
        p.a.clock.now += 10
        try p.a.store.items.update(syncedGenp("svc", "acct"), changes: ["v_Data": .data([2])], scope: scope)
        var row = try #require(try p.outgoing(p.a).first?.row)
        switch tampering {
        case .body: row.body[row.body.count / 2] ^= 1
        case .recordID: row.recordID = try #require(p.records.rows.keys.first { $0 != row.recordID })
        case .version: row.version.mdat += 1
        case .epoch: row.epoch = 2
        }
        row.seq = 100
        let before = try p.b.store.generation()
        #expect(try p.apply([row], to: p.b) == SyncApplyReport(rejected: 1))
        #expect(try p.b.secret(syncedGenp("svc", "acct")) == [1])
        #expect(try p.b.secret(syncedGenp("svc", "other")) == [9])
        #expect(try p.b.store.generation() == before + 1)  // the cursor moved; no item did
    }

    /// An item's add served again after its delete, past the cursor: the version rule alone
    /// would add it back (B no longer holds the item), the writer's counter gives it away.
    @Test func anOldRowServedAgainAfterTheCursorIsAReplay() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct"))
        let added = try #require(try p.push(p.a).first?.row)
        try p.pull(p.b)
        p.a.clock.now += 10
        try p.a.store.items.delete(syncedGenp("svc", "acct"), scope: scope)
        try p.push(p.a)
        try p.pull(p.b)
        p.records.serve(added)
        // B held the item and keeps its delete: it answers the old row with the delete again.
        #expect(try p.pull(p.b) == SyncApplyReport(rejected: 1, repushed: 1))
        #expect(try p.item(p.b, genp("svc", "acct")) == nil)
        // Read afresh (a first sync, a full reconcile), the same row is no replay, and the
        // kept delete, now queued again, still stops it (docs/sync.md 5, "Local tombstones").
        #expect(try p.apply([added], to: p.b, mode: .everyRow) == SyncApplyReport(superseded: 1))
        #expect(try p.item(p.b, genp("svc", "acct")) == nil)
    }

    /// What a rogue member (or a bug) could seal: a record whose attributes no keychaind
    /// writes is counted as rejected, and nothing is stored from it.
    @Test(arguments: ["agrp", "pdmn", "type"])
    func aRecordWithImpossibleAttributesIsRejected(_ spoiled: String) throws {
        let p = try SyncPair()
        var attributes: AttributeDictionary = [
            "svce": .string("svc"), "acct": .string("acct"), "agrp": .string("com.example.app"), "pdmn": .string("ak"),
            "sync": .int(1), "cdat": .date(1), "mdat": .date(1), "v_Data": .data([1]),
        ]
        switch spoiled {
        case "agrp": attributes["agrp"] = nil
        case "pdmn": attributes["pdmn"] = .string("ck")  // not the key class the record names
        default: attributes["type"] = .date(3)  // a number attribute holding a date
        }
        let version = SyncVersion(mdat: 1, writer: p.idA, counter: 1)
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .whenUnlocked, attributes, version: version, circleKey: p.circleKey)
        let row = SyncRecordRow(recordID: header.recordID, seq: 1, epoch: 1, version: version, tombstone: false, body: body)
        #expect(try p.apply([row], to: p.b) == SyncApplyReport(rejected: 1))
        #expect(try p.b.store.itemCount() == 0)
    }

    // MARK: locked classes

    @Test func anAkRowWhileLockedWaitsInTheInboxAndIsAppliedAfterUnlock() throws {
        let p = try SyncPair()
        try p.b.store.setPasscode([1, 2, 3])
        p.b.store.lock()
        try p.a.add(syncedGenp("svc", "ak", ["v_Data": .data([1])]))
        try p.a.add(syncedGenp("svc", "ck", ["pdmn": .string("ck"), "v_Data": .data([2])]))
        try p.push(p.a)
        #expect(try p.pull(p.b) == SyncApplyReport(applied: 1, deferred: 1))
        #expect(try SyncInboxTable(p.b.store.database).count() == 1)
        #expect(try p.b.secret(syncedGenp("svc", "ck")) == [2])
        #expect(try PulledRows(p.b.store.replica).applyInbox(circleKey: p.circleKey, writer: p.idB) == SyncApplyReport(deferred: 1))
        try p.b.store.unlock(passcode: [1, 2, 3])
        #expect(try PulledRows(p.b.store.replica).applyInbox(circleKey: p.circleKey, writer: p.idB) == SyncApplyReport(applied: 1))
        #expect(try p.b.secret(syncedGenp("svc", "ak")) == [1])
        #expect(try SyncInboxTable(p.b.store.database).count() == 0)
    }

    @Test func aDeleteOfAnItemOfALockedClassWaitsForTheUnlock() throws {
        let p = try SyncPair()
        try p.b.store.setPasscode([1, 2, 3])
        try p.a.add(syncedGenp("svc", "ak", ["v_Data": .data([1])]))
        try p.exchange(first: p.a, then: p.b)
        p.b.store.lock()
        p.a.clock.now += 10
        try p.a.store.items.delete(syncedGenp("svc", "ak"), scope: scope)
        try p.push(p.a)
        #expect(try p.pull(p.b) == SyncApplyReport(deferred: 1))
        try p.b.store.unlock(passcode: [1, 2, 3])
        #expect(try PulledRows(p.b.store.replica).applyInbox(circleKey: p.circleKey, writer: p.idB) == SyncApplyReport(applied: 1))
        #expect(try p.item(p.b, genp("svc", "ak")) == nil)
    }
}
