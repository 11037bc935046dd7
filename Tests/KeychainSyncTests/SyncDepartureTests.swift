import Foundation
@testable import KeychainCrypto
import KeychainModel
import KeychainStore
@testable import KeychainSync
import Testing

/// A device that left or was removed never comes back under its old identity (docs/sync.md,
/// 3, "No way back for a departed device"), and every roster entry wakes the circle's loops.
/// The attacker here is the removed device itself, which still holds its identity's secrets
/// and can write to the database like any member, or the database's operator.
@Suite("Sync departures: a removed device stays out, and approvals notify")
struct SyncDepartureTests {
    /// A and B members (A founded it, B approved), C removed by A; C's refresh saw it.
    private static func circleWithCRemoved(_ cluster: TestCluster) throws
        -> (a: TestDevice, b: TestDevice, c: TestDevice, circle: SyncFingerprint, cOld: SyncDeviceIdentity) {
        let a = try TestDevice(cluster), b = try TestDevice(cluster), c = try TestDevice(cluster)
        let made = try a.create("a")
        for (device, name) in [(b, "b"), (c, "c")] {
            try a.approve(try device.join(made.circle, name: name))
            #expect(try device.refresh() == .becameMember)
        }
        let cOld = try #require(try LocalCircle(c.store.replica).identity())
        try SyncRotation.remove(device: cOld.keys.fingerprint, store: a.store, database: a.database)
        #expect(try c.refresh() == .removed)
        return (a, b, c, made.circle, cOld)
    }

    private static func waiting(_ device: TestDevice) throws -> [SyncDeviceListing] {
        try SyncMembership.devices(store: device.store, database: device.database).filter { !$0.isMember }
    }

    @Test func theRemovalDeletesTheRemovedDevicesRequestSoNoMemberSeesItWaiting() throws {
        let cluster = try TestCluster()
        let (a, _, _, _, cOld) = try Self.circleWithCRemoved(cluster)
        #expect(try Self.waiting(a).isEmpty)
        let rows = try a.database.connection.query("SELECT count(*)::int8 FROM sync_devices WHERE device_id = $1",
                                                   [.bytea(cOld.id.bytes)])
        #expect(rows.rows.first?.first?.int == 0)
    }

    @Test func aRemovedDeviceThatAsksToJoinAgainWithItsOldIdentityIsRefusedAndGetsNoKey() throws {
        let cluster = try TestCluster()
        let (a, _, c, _, cOld) = try Self.circleWithCRemoved(cluster)
        let circleID = try #require(try LocalCircle(a.store.replica).roster()).circleID
        // The removed device writes its request back (any member's database login can).
        try c.database.requestToJoin(try SyncJoinRequest.signed(by: cOld, circleID: circleID, name: "c, honest"))
        #expect(try Self.waiting(a).isEmpty, "a departed device's request is not listed as waiting")
        let refused = expectError(.param) { try a.approve(cOld.keys.fingerprint) }
        #expect(refused?.message.contains("sync leave") == true, "the refusal says the way back: \(refused?.message ?? "")")
        let epoch = try #require(try LocalCircle(a.store.replica).roster()).epoch
        #expect(try a.database.wrappedKey(circleID: circleID, epoch: epoch, device: cOld.id) == nil)
        #expect(try LocalCircle(a.store.replica).roster()?.members[cOld.id] == nil)
    }

    @Test func aRosterEntryAddingADepartedDeviceBackIsRefusedByEveryMembersVerification() throws {
        let cluster = try TestCluster()
        let (a, _, _, _, cOld) = try Self.circleWithCRemoved(cluster)
        var roster = try #require(try LocalCircle(a.store.replica).roster())
        let signer = try #require(try LocalCircle(a.store.replica).identity())
        // A member's own signing refuses it...
        expectError(.param) { _ = try roster.signing(.add, subject: cOld.keys, by: signer, time: 1) }
        // ...and an entry signed by a member anyway (a changed member, a forged roster) does not verify.
        let entry = SyncRosterEntry(number: UInt32(roster.length), previous: roster.hash, kind: .add,
                                    circleID: roster.circleID, epoch: roster.epoch, subject: cOld.keys, time: 1, signer: signer.id)
        let forged = SignedRosterEntry(entry: entry, signature: signer.sign(entry.signedMessage))
        expectError(.decode) { try roster.append(forged) }
    }

    @Test func aRemovedDeviceThatLeavesComesBackAsANewDeviceWithNewDigits() throws {
        let cluster = try TestCluster()
        let (a, _, c, circle, cOld) = try Self.circleWithCRemoved(cluster)
        try SyncRotation.leave(store: c.store, database: c.database)
        #expect(try LocalCircle(c.store.replica).identity() == nil, "leave drops the identity with the circle")
        let fresh = try c.join(circle, name: "c, new")
        #expect(fresh != cOld.keys.fingerprint)
        try a.approve(fresh)
        #expect(try c.refresh() == .becameMember)
    }

    @Test func aPendingDeviceThatLeavesWithdrawsItsRequest() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let made = try a.create("a")
        let digits = try b.join(made.circle, name: "b")
        #expect(try Self.waiting(a).map(\.fingerprint) == [digits])
        try SyncRotation.leave(store: b.store, database: b.database)
        #expect(try Self.waiting(a).isEmpty)
        expectError(.itemNotFound) { try a.approve(digits) }
    }

    /// The pending device's loop LISTENs on the circle's channel; the approval must reach it
    /// there, or the new device waits for its next timed pass (60 s) before it syncs anything.
    @Test func anApprovalNotifiesTheCirclesChannel() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let made = try a.create("a")
        let digits = try b.join(made.circle, name: "b")
        let circleID = try #require(try LocalCircle(b.store.replica).roster()).circleID
        let listener = try PostgresConnection(cluster.url)
        try listener.listen(SyncDatabase.channel(circleID: circleID.bytes))
        try a.approve(digits)
        guard case .notified(let notes) = try listener.waitForNotifications(timeout: .seconds(60)) else {
            Issue.record("the approval sent no notification on the circle's channel")
            return
        }
        #expect(notes.contains { $0.senderProcessID == a.database.connection.serverProcessID })
    }
}
