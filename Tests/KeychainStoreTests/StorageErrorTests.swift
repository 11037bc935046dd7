import KeychainModel
import Testing
@testable import KeychainStorage
@testable import KeychainStore

/// Storage failures keep SQLite's own result code, so the store tells causes apart by code.
@Suite("Storage errors carry SQLite's result code")
struct StorageErrorTests {
    @Test func aFailedStatementKeepsSQLitesResultCode() throws {
        let db = try SQLiteDatabase(path: ":memory:")
        try db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        try db.run("INSERT INTO t(id) VALUES (1)")
        let error = refusal { try db.run("INSERT INTO t(id) VALUES (1)") }
        #expect(error?.status == .duplicateItem)
        let failure = try #require(error?.underlying as? SQLiteFailure, "\(String(describing: error))")
        #expect(failure.primaryCode == 19)  // SQLITE_CONSTRAINT
        #expect(failure.code == 1555)  // SQLITE_CONSTRAINT_PRIMARYKEY: the extended code is kept
        #expect(!failure.isLockedByAnotherConnection)
    }

    @Test func aSecondStoreOnTheSameDirectoryIsRefusedAsInUse() throws {
        let t = try TemporaryStore()
        let error = refusal { _ = try ItemStore(configuration: TemporaryStore.configuration(t.directory)) }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains("in use by another keychaind") == true, "\(String(describing: error))")
        #expect((error?.underlying as? SQLiteFailure)?.isLockedByAnotherConnection == true)
        // The first store is untouched and goes on working.
        try t.add(genp("s", "a"))
        #expect(try t.store.itemCount() == 1)
    }
}
