import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

/// A backup is assembled and opened by the store, with no daemon: the items are copied out,
/// sealed, opened with the password and added to another keychain.
@Suite("Backups are assembled by the store")
struct BackupAssemblyTests {
    let password = SecretBytes(bytes("backup password"))

    @Test func aBackupSealedFromOneStoreRestoresIntoAnother() throws {
        let a = try TemporaryStore(), b = try TemporaryStore()
        try a.add(genp("s", "leaves", ["v_Data": .data(bytes("secret"))]))
        try a.add(genp("s", "stays", ["v_Data": .data(bytes("local")), "pdmn": .string("aku")]))
        let sealed = try a.store.backupExporter.contents().seal(password: password)
        #expect(sealed.itemCount == 1 && sealed.excluded == 1)
        #expect(sealed.note.contains("1 ThisDeviceOnly"))
        let opened = try OpenedBackup(sealed.file, password: password)
        #expect(opened.header.itemCount == 1 && opened.header.excludedCount == 1)
        #expect(try b.store.restorer.restore(opened, onConflict: .fail) == RestoreSummary(restored: 1))
        #expect(try b.secret(genp("s", "leaves")) == bytes("secret"))
        #expect(try b.count(genp("s", "stays")) == 0)
    }

    @Test func aBackupDoesNotOpenWithAnotherPassword() throws {
        let a = try TemporaryStore()
        try a.add(genp("s", "a"))
        let sealed = try a.store.backupExporter.contents().seal(password: password)
        expectStatus(.authFailed) { _ = try OpenedBackup(sealed.file, password: SecretBytes(bytes("not it"))) }
    }
}
