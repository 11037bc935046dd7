import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore
@testable import KeychainSync
import Testing

private let scope = AccessScope(groups: ["com.example.app"])

/// The records exchange of one device, done by hand (no loop): its store, its key of the
/// local epoch, and its own connection.
extension TestDevice {
    var identity: SyncDeviceIdentity { get throws { try LocalCircle(store.replica).identity()! } }
    var circle: SyncCircleRow { get throws { try LocalCircle(store.replica).row()! } }
    var key: SyncCircleKey { get throws { try LocalCircle(store.replica).circleKey(epoch: try circle.epoch)! } }

    func addSynced(_ account: String, secret: String) throws {
        _ = try store.items.add(["class": .string("genp"), "svce": .string("rotation"), "acct": .string(account),
                           "sync": .int(1), "v_Data": .data(SecretBytes(Array(secret.utf8)))], scope: scope)
    }

    /// What copyMatching gives for the secret of the synced item `account`; nil when this
    /// keychain has none.
    func secret(_ account: String) throws -> QueryResult? {
        do {
            return try store.items.copyMatching(["class": .string("genp"), "svce": .string("rotation"), "acct": .string(account),
                                           "sync": .int(1), "r_Data": .bool(true)], scope: scope)
        } catch {
            if error.status == .itemNotFound { return nil }
            throw error
        }
    }

    /// Pushes the whole outbox under the local epoch's key.
    @discardableResult
    func push() throws -> SyncPushOutcome {
        let me = try identity
        let sent = try OutboxPush(store.replica).outgoing(circleKey: try key, writer: me.id, limit: 500)
        let head = SyncHead.signed(by: me, counter: sent.map(\.row.version.counter).max() ?? 0, roster: try LocalCircle(store.replica).roster()!)
        let outcome = try database.push(circleID: try key.circleID, epoch: try circle.epoch, rows: sent.map(\.row), head: head)
        if case .pushed = outcome { try OutboxPush(store.replica).pushed(sent) }
        return outcome
    }

    /// Pulls everything past the cursor, as the pass would (every row after a new epoch).
    @discardableResult
    func pull() throws -> SyncApplyReport {
        let row = try circle
        let batch = try database.pull(circleID: try key.circleID, after: row.cursor, limit: 10_000)
        return try PulledRows(store.replica).apply(batch.rows, circleKey: try key, writer: try identity.id,
                                   mode: row.lastFullPull == nil ? .everyRow : .afterCursor, cursor: batch.lastSeq)
    }

    func rows() throws -> [SyncRecordRow] {
        try database.pull(circleID: try SyncCircleID(try circle.circleID), after: 0, limit: 10_000).rows
    }
}

/// A, B and C in one circle founded by A, every one of them a member holding CCK(1).
private func circleOfThree(_ cluster: TestCluster) throws -> (TestDevice, TestDevice, TestDevice) {
    let a = try TestDevice(cluster), b = try TestDevice(cluster), c = try TestDevice(cluster)
    let made = try a.create("a")
    for (device, name) in [(b, "b"), (c, "c")] {
        try a.approve(try device.join(made.circle, name: name))
        #expect(try device.refresh() == .becameMember)
    }
    #expect(try a.refresh() == .verified)
    return (a, b, c)
}

@Suite("Sync rotation: remove, leave, and the re-seal under a new epoch")
struct SyncRotationTests {
    @Test func removingAMemberReSealsEveryRecordUnderTheNextEpochWithNewIDs() throws {
        let cluster = try TestCluster()
        let (a, _, c) = try circleOfThree(cluster)
        try a.addSynced("one", secret: "first secret")
        try a.addSynced("two", secret: "second secret")
        try a.push()
        let before = try a.rows()
        #expect(before.count == 2)

        let count = try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        #expect(count == SyncRotationCount(resealed: 2, dropped: 0))
        let after = try a.rows()
        #expect(after.count == 2 && after.allSatisfy { $0.epoch == 2 })
        #expect(try a.count("sync_records WHERE epoch = 1") == 0)
        #expect(Set(after.map(\.recordID)).isDisjoint(with: before.map(\.recordID)))
        #expect(Set(after.map(\.version)) == Set(before.map(\.version)), "mdat, writer and counter are the item's, kept")
        #expect(try a.database.circleState(circleID: try a.key.circleID)?.epoch == 2)
        #expect(try a.circle.epoch == 2 && LocalCircle(a.store.replica).circleKey(epoch: 2) != nil)
        #expect(try a.status().members == 2)
    }

    @Test func aRowThatDoesNotOpenAndATombstoneAreDroppedAndCountedNotCopied() throws {
        let cluster = try TestCluster()
        let (a, _, c) = try circleOfThree(cluster)
        try a.addSynced("kept", secret: "stays")
        try a.addSynced("gone", secret: "deleted")
        try a.push()
        try a.store.items.delete(["class": .string("genp"), "svce": .string("rotation"), "acct": .string("gone"), "sync": .int(1)],
                           scope: scope)
        try a.push()
        #expect(try a.rows().filter(\.tombstone).count == 1)
        try a.database.connection.query("""
            INSERT INTO sync_records (circle_id, record_id, seq, epoch, mdat, writer, counter, tombstone, body)
            VALUES ($1, $2, 1000, 1, 0, $3, 1, false, $4)
            """, [.bytea(try a.circle.circleID), .bytea(Array(repeating: 0x5A, count: 32)),
                  .bytea(Array(repeating: 0x0C, count: 16)), .bytea(Array(repeating: 0x99, count: 280))])

        let count = try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        #expect(count == SyncRotationCount(resealed: 1, dropped: 2))
        let rows = try a.rows()
        #expect(rows.count == 1 && !rows[0].tombstone && rows[0].epoch == 2)
    }

    @Test func aMemberAdoptsTheNewKeyAndReadsEveryReSealedRecord() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try a.addSynced("one", secret: "first secret")
        try a.push()
        try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)

        #expect(try b.refresh() == .newEpoch(2))
        #expect(try b.circle.epoch == 2 && b.circle.cursor == 0 && b.circle.lastFullPull == nil)
        let report = try b.pull()
        #expect(report.applied == 1 && report.rejected == 0)
        #expect(try b.secret("one") == .single(.data(Array("first secret".utf8))))
    }

    @Test func aRemovedDeviceOpensNothingWrittenAfterAndStopsKeepingItsItems() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try a.addSynced("old", secret: "before removal")
        try a.push()
        try c.pull()
        let oldKey = try c.key
        try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        _ = try b.refresh()
        try b.addSynced("new", secret: "after removal")
        #expect(try b.push() == .pushed(lastSeq: 3, lost: []), "seq 1 the first push, 2 its re-seal, 3 this one")

        for row in try b.rows() {
            let header = SyncRecordHeader(circleID: oldKey.circleID, recordID: row.recordID, epoch: row.epoch,
                                          version: row.version, tombstone: row.tombstone)
            expectError(.decode) { _ = try SyncRecordSealer.open(header, body: row.body, circleKey: oldKey) }
            var claimed = header
            claimed.epoch = 1
            expectError(.decode) { _ = try SyncRecordSealer.open(claimed, body: row.body, circleKey: oldKey) }
        }
        #expect(try c.refresh() == .removed)
        #expect(try c.status().state == "removed")
        #expect(try c.secret("old") == .single(.data(Array("before removal".utf8))))
        #expect(try c.refresh() == .removed)
    }

    @Test func aChangeNumberedUnderTheOldEpochIsPushedUnderTheNewOneAndApplied() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try b.addSynced("racing", secret: "sealed under epoch 1 first")
        try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        #expect(try b.push() == .epochMoved(current: 2))
        let numbered = try #require(try OutboxPush(b.store.replica).outgoing(circleKey: try b.key, writer: try b.identity.id, limit: 10).first)
        #expect(numbered.row.epoch == 1)

        #expect(try b.refresh() == .newEpoch(2))
        guard case .pushed = try b.push() else { Issue.record("the push under epoch 2 did not commit"); return }
        let row = try #require(try a.rows().first)
        #expect(row.epoch == 2 && row.version == numbered.row.version, "the same counter and mdat, sealed under the new key")
        #expect(try a.pull().applied == 1)
        #expect(try a.secret("racing") == .single(.data(Array("sealed under epoch 1 first".utf8))))
    }

    @Test func aRowPushedUnderThePassedEpochIsRefused() throws {
        let cluster = try TestCluster()
        let (a, _, c) = try circleOfThree(cluster)
        try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        try c.addSynced("late", secret: "written with the old key")
        #expect(try c.push() == .epochMoved(current: 2))
        #expect(try a.rows().isEmpty)
    }

    @Test func removingItselfIsAParameterErrorAndAnUnknownDeviceIsNotFound() throws {
        let cluster = try TestCluster()
        let (a, _, _) = try circleOfThree(cluster)
        let stranger = try TestDevice(cluster)
        _ = try LocalCircle(stranger.store.replica).identityMakingIfNeeded()
        expectError(.param) {
            try SyncRotation.remove(device: try a.identity.keys.fingerprint, store: a.store, database: a.database)
        }
        expectError(.itemNotFound) {
            try SyncRotation.remove(device: try stranger.identity.keys.fingerprint, store: a.store, database: a.database)
        }
        #expect(try a.count("sync_roster") == 3)
    }

    @Test func aLeaveIsRotatedByTheFirstMemberToRefresh() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try a.addSynced("kept", secret: "still here")
        try a.push()
        try c.pull()
        let cID = try c.identity.id
        try SyncRotation.leave(store: c.store, database: c.database)
        #expect(try c.status().state == "off")
        #expect(try LocalCircle(c.store.replica).identity() == nil, "the identity goes with the circle: a departed device comes back only as a new one")
        #expect(try c.secret("kept") == .single(.data(Array("still here".utf8))), "and so do the items")

        #expect(try b.refresh() == .newEpoch(2))
        let roster = try SyncRoster(verifying: try b.database.roster(circleID: try b.key.circleID))
        let last = try #require(roster.entries.last?.entry)
        let bID = try b.identity.id
        #expect(last.kind == .remove && last.subject.id == cID && last.signer == bID)
        #expect(roster.epoch == 2 && roster.members.count == 2 && roster.awaitingRotation.isEmpty)
        #expect(try a.refresh() == .newEpoch(2))
        #expect(try a.pull().applied == 0, "a's own record comes back re-sealed and changes nothing")
        #expect(try b.pull().applied == 1)
        #expect(try b.secret("kept") == .single(.data(Array("still here".utf8))))
    }

    @Test func aSecondMemberRacingToRotateFindsItDone() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try SyncRotation.leave(store: c.store, database: c.database)
        // b sees the leave but has not rotated yet when a does.
        #expect(try SyncMembership.refresh(store: b.store, database: b.database, mayRotate: false) == .verified)
        #expect(try a.refresh() == .newEpoch(2))
        #expect(try SyncRotation.rotateAfterLeave(store: b.store, database: b.database) == false)
        #expect(try b.refresh() == .newEpoch(2))
        #expect(try a.count("sync_roster") == 5, "found, two adds, the leave and one remove")
        #expect(try a.count("sync_wrapped_keys WHERE epoch = 2") == 2)
    }

    @Test func theRosterVerifiesEndToEndAndEveryMemberHoldsTheSameCopy() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        _ = try b.refresh()
        let stored = try SyncRoster(verifying: try a.database.roster(circleID: try a.key.circleID))
        #expect(stored.epoch == 2 && stored.members.count == 2)
        #expect(try LocalCircle(a.store.replica).roster()?.entries == stored.entries)
        #expect(try LocalCircle(b.store.replica).roster()?.entries == stored.entries)
        #expect(try c.refresh() == .removed)
        #expect(try LocalCircle(c.store.replica).roster()?.entries == stored.entries)
    }

    @Test func aWrapOfTheNewEpochThatDoesNotVerifyIsRefusedAndTheOldEpochKept() throws {
        let cluster = try TestCluster()
        let (a, b, c) = try circleOfThree(cluster)
        try SyncRotation.remove(device: try c.identity.keys.fingerprint, store: a.store, database: a.database)
        try b.database.connection.query("UPDATE sync_wrapped_keys SET sig = $1 WHERE epoch = 2 AND device_id = $2",
                                        [.bytea(Array(repeating: 7, count: 64)), .bytea(try b.identity.id.bytes)])
        expectError(.decode) { _ = try b.refresh() }
        #expect(try b.circle.epoch == 1 && LocalCircle(b.store.replica).circleKey(epoch: 2) == nil)
    }
}
