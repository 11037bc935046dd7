import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore
import StoreTestSupport

/// The store side of sync (docs/sync.md, 7.3): which local changes queue a push, in the same
/// transaction, and what a queued tombstone holds. Nothing here touches a network.
@Suite("Sync outbox")
struct SyncOutboxTests {
    let scope = TemporaryStore.app
    static let synced: AttributeDictionary = ["sync": .int(1)]
    static let anySync: AttributeDictionary = ["sync": .string("syna")]

    func entries(_ t: TemporaryStore) throws -> [OutboxEntry] { try OutboxTable(t.store.database).entries() }

    /// The items-table rowid of the one item `query` finds, whatever its sync value.
    func rowid(_ t: TemporaryStore, _ query: AttributeDictionary) throws -> Int64 {
        var q = query
        q["sync"] = q["sync"] ?? .string("syna")
        q["r_PersistentRef"] = .bool(true)
        guard case .single(.persistentRef(let bytes)) = try t.copy(q), let ref = PersistentRef(bytes: bytes) else { return -1 }
        return try t.store.database.query("SELECT rowid FROM items WHERE persistref = ?", [.blob(ref.id)]) { (s) throws(KeychainError) in
            try s.step() ? s.int(0) : -1
        }
    }

    /// What a push will do once it exists: mark the item's version as one the circle has.
    func markSynced(_ t: TemporaryStore, _ query: AttributeDictionary) throws {
        let id = try rowid(t, query)
        try t.store.database.run("UPDATE items SET sync_writer = ?, sync_counter = 7 WHERE rowid = ?",
                                 [.blob(Array(repeating: 0xAB, count: 16)), .int(id)])
    }

    func tombstones(_ t: TemporaryStore) throws -> [OutboxTombstone] {
        try entries(t).compactMap { if case .tombstone(let x) = $0.change { return x } else { return nil } }
    }

    // MARK: adds and updates

    @Test func anAddWithSyncQueuesExactlyOneEntryNamingTheItem() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        let entries = try entries(t)
        #expect(entries.count == 1)
        #expect(entries.first?.change == .version(item: try rowid(t, genp("s", "a"))))
        #expect(entries.first?.counter == nil)
    }

    @Test func itemsThatDoNotSyncQueueNothingWhateverIsDoneToThem() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b", ["pdmn": .string("aku")]))
        try t.store.items.update(genp("s", "a"), changes: ["labl": .string("L"), "acct": .string("c")], scope: scope)
        try t.store.items.delete(genp("s", "c"), scope: scope)
        try t.store.items.delete(genp("s", "b"), scope: scope)
        #expect(try entries(t).isEmpty)
    }

    @Test func aSynchronizableThisDeviceOnlyAddIsRefusedAndQueuesNothing() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(genp("s", "a", ["sync": .int(1), "pdmn": .string("cku")])) }
        #expect(try entries(t).isEmpty)
    }

    @Test func updatesOfAQueuedItemKeepOneEntryAndDropAnyCounterGiven() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try t.store.database.run("UPDATE sync_outbox SET counter = 3")  // as a push that began would
        try t.store.items.update(genp("s", "a", Self.synced), changes: ["v_Data": .data([2])], scope: scope)
        try t.store.items.update(genp("s", "a", Self.synced), changes: ["labl": .string("L")], scope: scope)
        let entries = try entries(t)
        #expect(entries.count == 1)
        #expect(entries.first?.counter == nil)
    }

    @Test func turningSyncOnQueuesTheItemAndTurningItOffUnqueuesIt() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.store.items.update(genp("s", "a"), changes: Self.synced, scope: scope)
        #expect(try entries(t).count == 1)
        try t.store.items.update(genp("s", "a", Self.synced), changes: ["sync": .int(0)], scope: scope)
        #expect(try entries(t).isEmpty)  // never synced: nothing to take back
    }

    @Test func anAddAndItsEntryCommitTogetherOrNotAtAll() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        expectStatus(.duplicateItem) { try t.add(genp("s", "a", Self.synced)) }
        // A failed update of several items leaves no entry for the ones it reached first.
        try t.add(genp("s", "b"))
        try t.add(genp("s", "c"))
        expectStatus(.duplicateItem) {
            try t.store.items.update(["class": .string("genp"), "svce": .string("s"), "sync": .int(0)],
                               changes: ["acct": .string("a"), "sync": .int(1)], scope: scope)
        }
        #expect(try entries(t).count == 1)
    }

    // MARK: deletes

    @Test func deletingAnItemNeverSyncedLeavesNoEntryAndNoCopyOfIt() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try t.add(genp("s", "b", Self.synced.merging(["labl": .string("only in the blob")]) { $1 }))
        try t.store.items.delete(genp("s", "a", Self.synced), scope: scope)  // columns only: one statement
        try t.store.items.delete(genp("s", "b", Self.synced.merging(["labl": .string("only in the blob")]) { $1 }), scope: scope)
        #expect(try entries(t).isEmpty)
    }

    @Test func deletingASyncedItemQueuesItsTombstoneHoldingTheBlobAsItWas() throws {
        let t = try TemporaryStore()
        try t.add(genp("svc-marker", "acct-marker", Self.synced.merging(["v_Data": .data(bytes("secret-marker"))]) { $1 }))
        try markSynced(t, genp("svc-marker", "acct-marker"))
        var before: ItemRow?
        try t.store.table.forEach(RowFilter(itemClass: .genericPassword, accessGroups: scope.groups, sync: 1)) { row in
            before = row
            return false
        }
        t.clock.now += 5
        try t.store.items.delete(genp("svc-marker", "acct-marker", Self.synced), scope: scope)
        let found = try tombstones(t)
        #expect(found.count == 1)
        guard let tombstone = found.first, let before else { return }
        #expect(tombstone.itemClass == .genericPassword && tombstone.protection == .whenUnlocked)
        #expect(tombstone.blob == before.blob)
        #expect(tombstone.mdat == ItemReplica.milliseconds(t.clock.now))
        // The blob opens as the item did, with its class key and the identity kept beside it.
        let key = try t.store.classKey(.whenUnlocked)
        let plaintext = try ItemSealer.open(tombstone.blob, identity: tombstone.identity, classKey: key)
        #expect(Array(plaintext).contains(subsequence: bytes("secret-marker")))
        // Nothing of the item is in the row in clear.
        let raw = try t.store.database.query("SELECT quote(class) || quote(pdmn) || quote(identity) || quote(blob) || quote(mdat) FROM sync_outbox") { (s) throws(KeychainError) in
            try s.step() ? s.text(0) : ""
        }
        for marker in ["svc-marker", "acct-marker", "secret-marker"] {
            #expect(!raw.contains(marker) && !raw.contains(hex(bytes(marker))), "\(marker)")
        }
    }

    @Test func aTombstoneIsNeverOlderThanTheVersionItRemoves() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try markSynced(t, genp("s", "a"))
        t.clock.now -= 3600  // the clock went back
        try t.store.items.delete(genp("s", "a", Self.synced), scope: scope)
        #expect(try tombstones(t).first?.mdat == ItemReplica.milliseconds(t.clock.now + 3600) + 1)
    }

    @Test func aDeleteOfEverySyncValueTombstonesTheSyncedItemsAmongItsMatches() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try t.add(genp("s", "b", Self.synced))
        try t.add(genp("s", "c"))
        try markSynced(t, genp("s", "a"))
        try t.store.items.delete(["class": .string("genp"), "svce": .string("s")].merging(Self.anySync) { $1 }, scope: scope)
        #expect(try t.store.itemCount() == 0)
        let entries = try entries(t)
        #expect(entries.count == 1)
        if case .tombstone = entries.first?.change {} else { Issue.record("not a tombstone: \(entries)") }
    }

    @Test func aSyncedItemOfALockedClassDeletedByItsColumnsStillLeavesItsTombstone() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(bytes("1234"))
        try t.add(genp("s", "a", Self.synced.merging(["v_Data": .data([5])]) { $1 }))
        try markSynced(t, genp("s", "a"))
        t.store.lock()
        try t.store.items.delete(genp("s", "a", Self.synced), scope: scope)
        let found = try tombstones(t)
        #expect(found.count == 1)
        guard let tombstone = found.first else { return }
        try t.store.unlock(passcode: bytes("1234"))
        let plaintext = try ItemSealer.open(tombstone.blob, identity: tombstone.identity, classKey: try t.store.classKey(.whenUnlocked))
        #expect(Array(plaintext).contains(subsequence: [5]))
    }

    @Test func changingTheRecordOfASyncedItemTombstonesTheOldOneAndQueuesTheNew() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try markSynced(t, genp("s", "a"))
        try t.store.items.update(genp("s", "a", Self.synced), changes: ["acct": .string("b")], scope: scope)
        let entries = try entries(t)
        #expect(entries.count == 2)
        #expect(entries.contains { if case .tombstone = $0.change { true } else { false } })
        #expect(entries.contains { $0.change == .version(item: try! rowid(t, genp("s", "b"))) })
        // The new record is one the circle has not seen: deleting it leaves no second tombstone.
        try t.store.items.delete(genp("s", "b", Self.synced), scope: scope)
        #expect(try tombstones(t).count == 1)
    }

    @Test func aSyncedItemTurnedOffSyncLeavesItsTombstoneAndNoVersion() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try markSynced(t, genp("s", "a"))
        try t.store.items.update(genp("s", "a", Self.synced), changes: ["sync": .int(0)], scope: scope)
        let entries = try entries(t)
        #expect(entries.count == 1)
        if case .tombstone = entries.first?.change {} else { Issue.record("not a tombstone: \(entries)") }
    }

    @Test func anUpdateThatKeepsTheRecordLeavesNoTombstone() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try markSynced(t, genp("s", "a"))
        try t.store.items.update(genp("s", "a", Self.synced), changes: ["labl": .string("L"), "pdmn": .string("dk")], scope: scope)
        #expect(try tombstones(t).isEmpty)
        #expect(try entries(t).count == 1)
    }

    @Test func theErasureDropsPendingTombstones() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced))
        try markSynced(t, genp("s", "a"))
        try t.store.items.delete(genp("s", "a", Self.synced), scope: scope)
        try t.store.erase()
        #expect(try entries(t).isEmpty)
    }

    // MARK: restore

    @Test func restoredSynchronizableItemsAreQueued() throws {
        let source = try TemporaryStore()
        try source.add(genp("s", "a", Self.synced))
        try source.add(genp("s", "b"))
        let exported = try source.store.backupExporter.migratableItems().items
        let t = try TemporaryStore()
        #expect(try t.store.restorer.importItems(exported, onConflict: .fail).restored == 2)
        #expect(try entries(t).map(\.change) == [.version(item: try rowid(t, genp("s", "a")))])
    }

    @Test func aRestoreReplacingASyncedItemIsItsNextVersionNotADelete() throws {
        let source = try TemporaryStore()
        try source.add(genp("s", "a", Self.synced.merging(["v_Data": .data([2])]) { $1 }))
        let exported = try source.store.backupExporter.migratableItems().items
        let t = try TemporaryStore()
        try t.add(genp("s", "a", Self.synced.merging(["v_Data": .data([1])]) { $1 }))
        try markSynced(t, genp("s", "a"))
        #expect(try t.store.restorer.importItems(exported, onConflict: .replace).replaced == 1)
        #expect(try tombstones(t).isEmpty)
        #expect(try entries(t).count == 1)
        // It inherits the record's stamp, so deleting it now does tell the circle.
        try t.store.items.delete(genp("s", "a", Self.synced), scope: scope)
        #expect(try tombstones(t).count == 1)
    }
}

private func hex(_ bytes: [UInt8]) -> String {
    let digits = Array("0123456789ABCDEF")
    return String(bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] })
}

private extension Array where Element: Equatable {
    func contains(subsequence: [Element]) -> Bool {
        guard !subsequence.isEmpty, subsequence.count <= count else { return subsequence.isEmpty }
        return (0...(count - subsequence.count)).contains { Array(self[$0..<($0 + subsequence.count)]) == subsequence }
    }
}
