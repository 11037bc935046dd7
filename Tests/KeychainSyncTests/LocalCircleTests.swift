import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainSync
import Testing
@testable import KeychainStore
import StoreTestSupport

/// The local half of sync membership (docs/sync.md, 2.1, 2.2, 7.3): the identity, circle keys
/// and roster kept under CK[ck], and never carried by a backup.
@Suite("Sync membership in the local store")
struct LocalCircleTests {
    let passcode = bytes("correct horse")

    /// `t`'s store founding a circle of its own, as `sync create` leaves it.
    func found(_ t: TemporaryStore) throws -> (SyncDeviceIdentity, SyncRoster) {
        let identity = try LocalCircle(t.store.replica).identityMakingIfNeeded()
        let roster = SyncRoster.found(circleID: .random(), by: identity, time: 1)
        try LocalCircle(t.store.replica).enter(roster: roster, state: "member", circleKey: .random(circleID: roster.circleID, epoch: 1))
        return (identity, roster)
    }

    @Test func theIdentityIsMadeOnceAndIsTheSameAfterARestart() throws {
        let t = try TemporaryStore()
        #expect(try LocalCircle(t.store.replica).identity() == nil)
        let made = try LocalCircle(t.store.replica).identityMakingIfNeeded()
        #expect(try LocalCircle(t.store.replica).identityMakingIfNeeded().keys == made.keys)
        try t.reopen()
        #expect(try LocalCircle(t.store.replica).identity()?.keys == made.keys)
        #expect(try LocalCircle(t.store.replica).deviceKeys() == made.keys)
    }

    @Test func beforeTheFirstUnlockTheIdentityAndKeysAreUnavailableAndSaySoButThePublicKeysAreNot() throws {
        let t = try TemporaryStore()
        let (identity, _) = try found(t)
        try t.store.setPasscode(passcode)
        try t.reopen()
        do {
            _ = try LocalCircle(t.store.replica).identity()
            Issue.record("the identity opened before the first unlock")
        } catch {
            #expect(error.status == .interactionNotAllowed)
            #expect(error.message.contains("keychain unlock"))
        }
        expectError(.interactionNotAllowed) { _ = try LocalCircle(t.store.replica).circleKey(epoch: 1) }
        expectError(.interactionNotAllowed) { _ = try LocalCircle(t.store.replica).identityMakingIfNeeded() }
        #expect(try LocalCircle(t.store.replica).deviceKeys() == identity.keys)
        #expect(try LocalCircle(t.store.replica).roster()?.length == 1)
        try t.store.unlock(passcode: passcode)
        #expect(try LocalCircle(t.store.replica).identity()?.keys == identity.keys)
        #expect(try LocalCircle(t.store.replica).circleKey(epoch: 1) != nil)
    }

    @Test func aRosterRowAlteredOnDiskIsRefusedNotBelieved() throws {
        let t = try TemporaryStore()
        _ = try found(t)
        try t.editFile { db in try db.run("UPDATE sync_roster SET entry = substr(entry, 1, 160) || x'00'") }
        expectError(.decode) { _ = try LocalCircle(t.store.replica).roster() }
    }

    @Test func anEraseForgetsTheMembershipWhoseKeysItReplacesSoANewIdentityCanBeMade() throws {
        let t = try TemporaryStore()
        let (identity, _) = try found(t)
        try t.store.erase()
        #expect(try LocalCircle(t.store.replica).identity() == nil)
        #expect(try LocalCircle(t.store.replica).row() == nil)
        #expect(try LocalCircle(t.store.replica).roster() == nil)
        #expect(try LocalCircle(t.store.replica).identityMakingIfNeeded().keys != identity.keys)
    }

    @Test func aBackupCarriesNoIdentityCircleKeyOrRoster() throws {
        let a = try TemporaryStore(), b = try TemporaryStore()
        _ = try found(a)
        try a.add(genp("s", "synced", ["v_Data": .data(bytes("secret")), "sync": .int(1)]))
        let password = SecretBytes(bytes("backup password"))
        let sealed = try a.store.backupExporter.contents().seal(password: password)
        _ = try b.store.restorer.restore(try OpenedBackup(sealed.file, password: password), onConflict: .fail)
        #expect(try b.secret(genp("s", "synced", ["sync": .int(1)])) == bytes("secret"))
        #expect(try LocalCircle(b.store.replica).identity() == nil)
        #expect(try LocalCircle(b.store.replica).row() == nil)
        for table in ["sync_identity", "sync_circle", "sync_keys", "sync_roster"] {
            let rows = try b.store.database.query("SELECT count(*) FROM \(table)") { (s) throws(KeychainError) in
                try s.step() ? s.int(0) : -1
            }
            #expect(rows == 0, "\(table)")
        }
    }
}
