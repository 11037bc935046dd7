import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore

/// The local half of sync membership (docs/sync.md, 2.1, 2.2, 7.3): the identity, circle keys
/// and roster kept under CK[ck], and never carried by a backup.
@Suite("Sync membership in the local store")
struct SyncMembershipStoreTests {
    let passcode = bytes("correct horse")

    /// `t`'s store founding a circle of its own, as `sync create` leaves it.
    func found(_ t: TemporaryStore) throws -> (SyncDeviceIdentity, SyncRoster) {
        let identity = try t.store.syncIdentityMakingIfNeeded()
        let roster = SyncRoster.found(circleID: .random(), by: identity, time: 1)
        try t.store.syncEnter(roster: roster, state: "member", circleKey: .random(circleID: roster.circleID, epoch: 1))
        return (identity, roster)
    }

    @Test func theIdentityIsMadeOnceAndIsTheSameAfterARestart() throws {
        let t = try TemporaryStore()
        #expect(try t.store.syncIdentity() == nil)
        let made = try t.store.syncIdentityMakingIfNeeded()
        #expect(try t.store.syncIdentityMakingIfNeeded().keys == made.keys)
        try t.reopen()
        #expect(try t.store.syncIdentity()?.keys == made.keys)
        #expect(try t.store.syncDeviceKeys() == made.keys)
    }

    @Test func beforeTheFirstUnlockTheIdentityAndKeysAreUnavailableAndSaySoButThePublicKeysAreNot() throws {
        let t = try TemporaryStore()
        let (identity, _) = try found(t)
        try t.store.setPasscode(passcode)
        try t.reopen()
        do {
            _ = try t.store.syncIdentity()
            Issue.record("the identity opened before the first unlock")
        } catch {
            #expect(error.status == .interactionNotAllowed)
            #expect(error.message.contains("keychain unlock"))
        }
        expectStatus(.interactionNotAllowed) { _ = try t.store.syncCircleKey(epoch: 1) }
        expectStatus(.interactionNotAllowed) { _ = try t.store.syncIdentityMakingIfNeeded() }
        #expect(try t.store.syncDeviceKeys() == identity.keys)
        #expect(try t.store.syncRoster()?.length == 1)
        try t.store.unlock(passcode: passcode)
        #expect(try t.store.syncIdentity()?.keys == identity.keys)
        #expect(try t.store.syncCircleKey(epoch: 1) != nil)
    }

    @Test func aRosterRowAlteredOnDiskIsRefusedNotBelieved() throws {
        let t = try TemporaryStore()
        _ = try found(t)
        try t.editFile { db in try db.run("UPDATE sync_roster SET entry = substr(entry, 1, 160) || x'00'") }
        expectStatus(.decode) { _ = try t.store.syncRoster() }
    }

    @Test func anEraseForgetsTheMembershipWhoseKeysItReplacesSoANewIdentityCanBeMade() throws {
        let t = try TemporaryStore()
        let (identity, _) = try found(t)
        try t.store.erase()
        #expect(try t.store.syncIdentity() == nil)
        #expect(try t.store.syncCircle() == nil)
        #expect(try t.store.syncRoster() == nil)
        #expect(try t.store.syncIdentityMakingIfNeeded().keys != identity.keys)
    }

    @Test func aBackupCarriesNoIdentityCircleKeyOrRoster() throws {
        let a = try TemporaryStore(), b = try TemporaryStore()
        _ = try found(a)
        try a.add(genp("s", "synced", ["v_Data": .data(bytes("secret")), "sync": .int(1)]))
        let password = SecretBytes(bytes("backup password"))
        let sealed = try a.store.backupExporter.contents().seal(password: password)
        _ = try b.store.restorer.restore(try OpenedBackup(sealed.file, password: password), onConflict: .fail)
        #expect(try b.secret(genp("s", "synced", ["sync": .int(1)])) == bytes("secret"))
        #expect(try b.store.syncIdentity() == nil)
        #expect(try b.store.syncCircle() == nil)
        for table in ["sync_identity", "sync_circle", "sync_keys", "sync_roster"] {
            let rows = try b.store.database.query("SELECT count(*) FROM \(table)") { (s) throws(KeychainError) in
                try s.step() ? s.int(0) : -1
            }
            #expect(rows == 0, "\(table)")
        }
    }
}
