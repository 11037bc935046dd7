import KeychainModel
import Testing
@testable import KeychainStorage
@testable import KeychainStore
import StoreTestSupport

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

    /// A table with one constraint of each kind; `parent` holds the row 1 that `child` may name.
    private func constrained() throws -> SQLiteDatabase {
        let db = try SQLiteDatabase(path: ":memory:")
        try db.execute("""
            CREATE TABLE parent(id INTEGER PRIMARY KEY);
            CREATE TABLE t(id INTEGER PRIMARY KEY, u TEXT UNIQUE, n TEXT NOT NULL, c INTEGER CHECK (c > 0),
                           p INTEGER REFERENCES parent(id));
            INSERT INTO parent(id) VALUES (1);
            INSERT INTO t(id, u, n, c, p) VALUES (1, 'taken', 'n', 1, 1);
            """)
        return db
    }

    @Test func aSecondRowWithTheSamePrimaryKeyIsADuplicateItem() throws {
        let db = try constrained()
        let error = refusal { try db.run("INSERT INTO t(id, n) VALUES (1, 'n')") }
        #expect(error?.status == .duplicateItem, "\(String(describing: error))")
    }

    @Test func aSecondRowWithTheSameUniqueValueIsADuplicateItem() throws {
        let db = try constrained()
        let error = refusal { try db.run("INSERT INTO t(id, u, n) VALUES (2, 'taken', 'n')") }
        #expect(error?.status == .duplicateItem, "\(String(describing: error))")
        #expect((error?.underlying as? SQLiteFailure)?.code == 2067)  // SQLITE_CONSTRAINT_UNIQUE
    }

    @Test func aMissingNotNullValueIsAnInternalErrorNotADuplicate() throws {
        let db = try constrained()
        let error = refusal { try db.run("INSERT INTO t(id, n) VALUES (2, NULL)") }
        #expect(error?.status == .internal, "\(String(describing: error))")
        #expect(error?.message.contains("NOT NULL constraint failed") == true, "\(String(describing: error))")
    }

    @Test func aFailedCheckIsAnInternalErrorNotADuplicate() throws {
        let db = try constrained()
        let error = refusal { try db.run("INSERT INTO t(id, n, c) VALUES (2, 'n', 0)") }
        #expect(error?.status == .internal, "\(String(describing: error))")
        #expect(error?.message.contains("CHECK constraint failed") == true, "\(String(describing: error))")
    }

    @Test func aMissingForeignKeyTargetIsAnInternalErrorNotADuplicate() throws {
        let db = try constrained()
        let error = refusal { try db.run("INSERT INTO t(id, n, p) VALUES (2, 'n', 7)") }
        #expect(error?.status == .internal, "\(String(describing: error))")
        #expect(error?.message.contains("FOREIGN KEY constraint failed") == true, "\(String(describing: error))")
    }

    @Test func aConstraintRaisedByATriggerIsAnInternalErrorNotADuplicate() throws {
        let db = try constrained()
        try db.execute("CREATE TRIGGER refuse BEFORE INSERT ON parent BEGIN SELECT RAISE(ABORT, 'refused'); END")
        let error = refusal { try db.run("INSERT INTO parent(id) VALUES (2)") }
        #expect(error?.status == .internal, "\(String(describing: error))")
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
