import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainStore
import StoreTestSupport

/// New key material is made only where there is no keychain at all. A keychain missing a part
/// is refused and left as it is: a new keybag would leave every item unreadable (and let adds
/// replace them), a new device key could not open the old keybag, a new database would hide
/// the old one.
@Suite("A keychain missing a part is refused, never completed")
struct MissingPartTests {
    func raw(_ t: TemporaryStore) throws -> (items: ItemTable, keybag: KeybagTable) {
        let db = try SQLiteDatabase(path: t.directory + "/keychain.db")
        return (ItemTable(db), KeybagTable(db))
    }

    @Test func aDatabaseWithItemsButNoKeybagIsRefusedAndKeptAsItIs() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data(bytes("old secret"))]))
        let error = refusal { try t.editFile { try $0.execute("DELETE FROM keybag") } }
        #expect(error?.status == .decode)
        #expect(error?.message.contains("keybag") == true && error?.message.contains(t.directory + "/keychain.db") == true,
                "\(String(describing: error))")
        let table = try raw(t)
        #expect(try table.keybag.record() == nil)
        #expect(try table.items.count() == 1)
    }

    @Test func aDatabaseThatCommittedWritesButHasNoKeybagIsRefusedEvenWithNoItemsLeft() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.store.items.delete(genp("s", "a"), scope: TemporaryStore.app)
        let error = refusal { try t.editFile { try $0.execute("DELETE FROM keybag") } }
        #expect(error?.status == .decode)
        #expect(try raw(t).keybag.record() == nil)
    }

    @Test func aDatabaseWithoutItsDeviceKeyIsRefusedAndNoKeyIsMade() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        t.store = nil
        unlink(t.directory + "/device.key")
        let error = refusal { try t.reopen() }
        #expect(error?.status == .decode)
        #expect(error?.message.contains(t.directory + "/device.key") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: t.directory + "/device.key"))
    }

    @Test func aDeviceKeyWithoutItsDatabaseIsRefusedAndNoDatabaseIsMade() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        t.store = nil
        unlink(t.directory + "/keychain.db")
        let error = refusal { try t.reopen() }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains("restore \(t.directory)/keychain.db") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: t.directory + "/keychain.db"))
    }

    @Test func aDeviceKeyAloneSaysWhichFileToRemove() throws {
        // An older keychaind made the key before the database: a first start of it interrupted
        // there left just this, and nothing was ever stored.
        let s = try Scratch()
        try s.mkdir("state")
        _ = try DeviceKeyFile.loadOrCreate(path: s.file("device.key"))
        let error = refusal { _ = try s.open() }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains("remove \(s.file("device.key"))") == true, "\(String(describing: error))")
        #expect(!s.exists(s.file("keychain.db")))
    }

    // MARK: a first start interrupted at any point starts again by itself

    @Test func aFirstStartInterruptedAfterMakingTheEmptyDatabaseFileStartsAgain() throws {
        let s = try Scratch()
        try s.mkdir("state")
        #expect(FileManager.default.createFile(atPath: s.file("keychain.db"), contents: nil, attributes: [.posixPermissions: 0o600]))
        try s.makeKeychain()
        #expect(s.exists(s.file("device.key")))
    }

    @Test func aFirstStartInterruptedAfterMakingTheDeviceKeyStartsAgain() throws {
        let s = try Scratch()
        try s.mkdir("state")
        #expect(FileManager.default.createFile(atPath: s.file("keychain.db"), contents: nil, attributes: [.posixPermissions: 0o600]))
        let key = try DeviceKeyFile.loadOrCreate(path: s.file("device.key"))
        try s.makeKeychain()
        #expect(try DeviceKeyFile.loadOrCreate(path: s.file("device.key")).withUnsafeBytes(Array.init)
                == key.withUnsafeBytes(Array.init), "the key made then is the keychain's")
    }

    @Test func aFirstStartInterruptedBeforeSavingTheKeybagStartsAgain() throws {
        let s = try Scratch()
        try s.mkdir("state")
        #expect(FileManager.default.createFile(atPath: s.file("keychain.db"), contents: nil, attributes: [.posixPermissions: 0o600]))
        _ = try DeviceKeyFile.loadOrCreate(path: s.file("device.key"))
        do {
            let db = try SQLiteDatabase(path: s.file("keychain.db"))
            try Schema.migrate(db)
        }
        try s.makeKeychain()
        let store = try s.open()
        #expect(try store.itemCount() == 1)
    }
}
