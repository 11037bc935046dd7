import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainSync
import Testing
@testable import KeychainStore
import StoreTestSupport

/// The push's local half (docs/sync.md, 7.1 and 7.3): which entries become rows, with which
/// version, and when they leave the outbox.
@Suite("Sync exchange: push")
struct SyncPushExchangeTests {
    let scope = SyncPair.scope

    @Test func thisDeviceOnlyAndUnsyncedItemsNeverBecomeRows() throws {
        let p = try SyncPair()
        try p.a.add(genp("svc", "plain"))
        try p.a.add(genp("svc", "local", ["pdmn": .string("cku")]))
        // Even entries forced into the outbox by editing the file: a sync = 0 item, and a
        // ThisDeviceOnly item edited to say sync = 1.
        try p.a.store.database.run("UPDATE items SET sync = 1 WHERE pdmn = 'cku'")
        try p.a.store.database.run("INSERT INTO sync_outbox(item) SELECT rowid FROM items")
        #expect(try p.outbox(p.a).count == 2)
        #expect(try p.outgoing(p.a).isEmpty)
        #expect(try p.outbox(p.a).isEmpty)  // dropped: they can never go
    }

    @Test func aRetryBeforeTheStoreConfirmedCarriesTheSameTuple() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "one"))
        p.a.clock.now += 1
        try p.a.add(syncedGenp("svc", "two"))
        let first = try p.outgoing(p.a)
        p.a.clock.now += 100
        let retry = try p.outgoing(p.a)
        #expect(first.map(\.row.version) == retry.map(\.row.version))
        #expect(first.map(\.row.recordID) == retry.map(\.row.recordID))
        #expect(first.map(\.row.version.counter) == [1, 2])
        // The store takes the retry as the same rows: nothing changes, nothing is lost.
        #expect(p.records.push(first.map(\.row)).isEmpty)
        #expect(p.records.push(retry.map(\.row)).isEmpty)
        #expect(p.records.seq == 2)
    }

    @Test func aVersionIsStampedOnTheItemWhenNumberedAndTheStampSurvivesARestart() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct"))
        let sent = try #require(try p.outgoing(p.a).first?.row.version)
        let stamp = ReplicaStamp(writer: p.idA.bytes, counter: sent.counter, mdat: sent.mdat)
        #expect(try p.syncedRow(p.a)?.replicaStamp == stamp)
        try p.a.reopen()
        #expect(try p.syncedRow(p.a)?.replicaStamp == stamp)
        #expect(try p.outgoing(p.a).first?.row.version == sent)  // the retry after the restart
        #expect(sent.mdat == ItemReplica.milliseconds(p.a.clock.now))
    }

    @Test func pushedEntriesLeaveTheOutboxButOneChangedSinceStays() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "one"))
        try p.a.add(syncedGenp("svc", "two"))
        let sent = try p.outgoing(p.a)
        p.a.clock.now += 1
        try p.a.store.items.update(syncedGenp("svc", "two"), changes: ["v_Data": .data([2])], scope: scope)
        try OutboxPush(p.a.store.replica).pushed(sent)
        let left = try p.outbox(p.a)
        #expect(left.count == 1 && left.first?.counter == nil)
        #expect(try p.outgoing(p.a).first?.row.version.counter == 3)
    }

    /// A retried entry goes before entries numbered after it, even one written earlier and
    /// re-queued since: the store must see this writer's counters rise.
    @Test func numberedEntriesGoOutInCounterOrder() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "one"))
        try p.a.add(syncedGenp("svc", "two"))
        _ = try p.outgoing(p.a)  // numbered 1 and 2, never confirmed
        p.a.clock.now += 1
        try p.a.store.items.update(syncedGenp("svc", "one"), changes: ["v_Data": .data([2])], scope: scope)
        #expect(try p.push(p.a).map(\.row.version.counter) == [2, 3])
        #expect(try p.pull(p.b) == SyncApplyReport(applied: 2))
    }

    @Test func anUpdateGoesOutLaterThanTheVersionItReplaces() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct"))
        let first = try #require(try p.push(p.a).first?.row.version)
        // The clock went back: the new version still supersedes the old one.
        p.a.clock.now -= 3600
        try p.a.store.items.update(syncedGenp("svc", "acct"), changes: ["v_Data": .data([2])], scope: scope)
        let second = try #require(try p.push(p.a).first?.row.version)
        #expect(second > first && second.mdat > first.mdat)
    }

    /// An ak entry numbered, then left behind by a lock while a ck one goes, is numbered anew
    /// after the unlock: a writer's counters must rise with the store's seq.
    @Test func anEntryWaitingForItsClassKeyIsSkippedAndRenumberedAfterTheUnlock() throws {
        let p = try SyncPair()
        try p.a.store.setPasscode([1, 2, 3])
        try p.a.add(syncedGenp("svc", "ak"))
        #expect(try p.outgoing(p.a).first?.row.version.counter == 1)  // numbered, never confirmed
        p.a.store.lock()
        try p.a.add(syncedGenp("svc", "ck", ["pdmn": .string("ck")]))
        let whileLocked = try p.push(p.a)
        #expect(whileLocked.map(\.row.version.counter) == [2])
        #expect(try p.outbox(p.a).count == 1)
        try p.a.store.unlock(passcode: [1, 2, 3])
        let afterUnlock = try p.push(p.a)
        #expect(afterUnlock.map(\.row.version.counter) == [3])
        #expect(try p.outbox(p.a).isEmpty)
        // B, pulling after its cursor, takes both: the renumbered one is no replay.
        #expect(try p.pull(p.b) == SyncApplyReport(applied: 2))
    }

    @Test func aTombstoneNamesTheRecordItsItemHad() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "acct"))
        let added = try #require(try p.push(p.a).first?.row)
        p.a.clock.now += 1
        try p.a.store.items.delete(syncedGenp("svc", "acct"), scope: scope)
        let deleted = try #require(try p.push(p.a).first?.row)
        #expect(deleted.tombstone && deleted.recordID == added.recordID && deleted.version > added.version)
    }
}
