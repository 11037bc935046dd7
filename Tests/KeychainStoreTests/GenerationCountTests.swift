#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainStorage
import StoreTestSupport
import Testing
@testable import KeychainStore

/// The database counts the write transactions it commits (its generation, schema v3), so that
/// one that lost some can be told from one that did not.
@Suite("The database counts its write transactions")
struct GenerationCountTests {
    func generation(_ t: TemporaryStore) throws -> Int64 { try t.store.table.generation() }

    @Test func aNewKeychainHasCommittedOneTransactionItsKeybag() throws {
        let t = try TemporaryStore()
        #expect(try generation(t) == 1)
    }

    @Test func everyCallThatWritesCountsOne() throws {
        let t = try TemporaryStore()
        let start = try generation(t)
        try t.add(genp("s", "a"))
        #expect(try generation(t) == start + 1)
        try t.store.items.update(genp("s", "a"), changes: ["labl": .string("l")], scope: TemporaryStore.app)
        #expect(try generation(t) == start + 2)
        try t.store.items.delete(genp("s", "a"), scope: TemporaryStore.app)
        #expect(try generation(t) == start + 3)
        try t.store.savePasscodeFailures(1, lastFailure: 1)
        #expect(try generation(t) == start + 4)
        try t.store.setPasscode(bytes("1234"))
        #expect(try generation(t) == start + 5)
    }

    @Test func aGroupCommitCountsOneWhateverItHolds() throws {
        let t = try TemporaryStore()
        let start = try generation(t)
        try t.store.inOneTransaction {
            for i in 0..<5 { _ = try? t.add(genp("s", "\(i)")) }
        }
        #expect(try t.store.itemCount() == 5)
        #expect(try generation(t) == start + 1)
    }

    @Test func readsAndRefusedWritesCountNothing() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let before = try generation(t)
        _ = try t.secret(genp("s", "a"))
        expectStatus(.duplicateItem) { try t.add(genp("s", "a")) }
        expectStatus(.itemNotFound) { try t.store.items.delete(genp("s", "absent"), scope: TemporaryStore.app) }
        #expect(try generation(t) == before)
    }

    @Test func theCountSurvivesARestart() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        let before = try generation(t)
        try t.reopen()
        #expect(try generation(t) == before)
    }

    @Test func aDatabaseFromBeforeTheCountStartsAtZeroWithItsItems() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([7])]))
        try t.editFile { db in
            try undoSchemaV6(db)
            try db.execute("DROP TABLE generation")
            try db.execute("DROP TABLE item_attributes")  // schema v5
            try db.execute("DROP TABLE number_rehash")
            try db.execute("PRAGMA user_version = 2")
            unlink(t.directory + "/keychain.generation")  // a keychaind of then kept no record
        }
        // The count starts at zero; the first transaction it counts is the schema-4 rehash of
        // the database's ak items, done as the store opens.
        #expect(try generation(t) == 1)
        #expect(try t.secret(genp("s", "a")) == [7])
        try t.add(genp("s", "b"))
        #expect(try generation(t) == 2)
    }
}
