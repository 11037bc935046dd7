import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainSync
import Testing
@testable import KeychainStore
import StoreTestSupport

/// The end of a full pull (docs/sync.md, 5): a synced item whose record the store no longer
/// holds was deleted elsewhere, its tombstone lost to expiry or to a rotation.
@Suite("Sync exchange: full reconcile")
struct SyncReconcileTests {
    let scope = SyncPair.scope

    @Test func anItemTheCircleHadButNoLongerHoldsIsDeleted() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "gone"))
        _ = try p.push(p.a)
        #expect(try StampedItems(p.a.store.replica).reconcile(present: [], circleKey: p.circleKey) == 1)
        #expect(try p.item(p.a, syncedGenp("svc", "gone")) == nil)
        #expect(try p.outbox(p.a).isEmpty)  // no tombstone: the circle has no such record
    }

    @Test func anItemWhoseRecordTheStoreHoldsStays() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "kept"))
        let sent = try p.push(p.a)
        #expect(try StampedItems(p.a.store.replica).reconcile(present: Set(sent.map(\.row.recordID)), circleKey: p.circleKey) == 0)
        #expect(try p.item(p.a, syncedGenp("svc", "kept")) != nil)
    }

    @Test func anItemChangedHereSinceItsLastSyncStaysToBePushed() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "changed"))
        _ = try p.push(p.a)
        p.a.clock.now += 1
        try p.a.store.items.update(syncedGenp("svc", "changed"), changes: ["v_Data": .data([9])], scope: scope)
        #expect(try StampedItems(p.a.store.replica).reconcile(present: [], circleKey: p.circleKey) == 0)
        #expect(try p.item(p.a, syncedGenp("svc", "changed")) != nil)
        #expect(try p.outbox(p.a).count == 1)
    }

    @Test func itemsNeverSyncedAndLocalItemsStay() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "new"))       // queued, never pushed: no stamp
        try p.a.add(genp("svc", "local"))           // sync = 0
        #expect(try StampedItems(p.a.store.replica).reconcile(present: [], circleKey: p.circleKey) == 0)
        #expect(try p.item(p.a, syncedGenp("svc", "new")) != nil)
        var local = genp("svc", "local")
        local["r_Attributes"] = .bool(true)
        guard case .single(.attributes)? = try? p.a.copy(local) else {
            Issue.record("the sync = 0 item went")
            return
        }
    }

    @Test func aPulledItemMissingFromALaterFullPullIsDeleted() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "shared"))
        _ = try p.push(p.a)
        #expect(try p.pull(p.b, mode: .everyRow) == SyncApplyReport(applied: 1))
        #expect(try p.item(p.b, syncedGenp("svc", "shared")) != nil)
        #expect(try StampedItems(p.b.store.replica).reconcile(present: [], circleKey: p.circleKey) == 1)
        #expect(try p.item(p.b, syncedGenp("svc", "shared")) == nil)
    }

    @Test func aKeyOfAnotherEpochIsRefusedAndNothingIsDeleted() throws {
        let p = try SyncPair()
        try p.a.add(syncedGenp("svc", "kept"))
        _ = try p.push(p.a)
        let other = SyncCircleKey.random(circleID: p.circleKey.circleID, epoch: 2)
        #expect(throws: KeychainError.self) { try StampedItems(p.a.store.replica).reconcile(present: [], circleKey: other) }
        #expect(try p.item(p.a, syncedGenp("svc", "kept")) != nil)
    }
}
