#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainStorage
import StoreTestSupport
import Testing
@testable import KeychainStore

@Suite("The store on disk")
struct PersistenceTests {
    @Test func reopeningFindsEveryItemOfEveryClass() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1])]))
        try t.add(["class": .string("inet"), "srvr": .string("h"), "v_Data": .data([2])])
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data([4])])
        try t.reopen()
        #expect(try t.secret(genp("s", "a")) == [1])
        #expect(try t.secret(["class": .string("inet"), "srvr": .string("h")]) == [2])
        #expect(try t.secret(["class": .string("cert")]) == TestCertificate.p256DER)
        #expect(try t.secret(["class": .string("keys")]) == [4])
    }

    @Test func filesAndDirectoryArePrivate() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        #expect(try mode(t.directory) == 0o700)
        for name in ["device.key", "keychain.db", "keychain.db-wal"] {
            #expect(try mode(t.directory + "/" + name) == 0o600, "\(name)")
        }
    }

    @Test func aDatabaseFromANewerVersionIsRefused() throws {
        let t = try TemporaryStore()
        expectStatus(.notAvailable) {
            try t.editFile { try $0.execute("PRAGMA user_version = \(Schema.currentVersion + 1)") }
        }
    }

    @Test func aVersionOneDatabaseMigratesForwardKeepingItsItems() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([42])]))
        try t.editFile { db in
            try undoSchemaV6(db)
            try db.execute("DROP TABLE generation")
            try db.execute("DROP TABLE lockout")
            try db.execute("DROP TABLE item_attributes")  // schema v5
            try db.execute("DROP TABLE number_rehash")
            try db.execute("PRAGMA user_version = 1")
            unlink(t.directory + "/keychain.generation")  // a keychaind of then kept no record
        }
        #expect(try t.store.database.userVersion == Schema.currentVersion)
        #expect(try t.secret(genp("s", "a")) == [42])
        try t.store.savePasscodeFailures(3, lastFailure: 5)
        #expect(try t.store.passcodeFailures() == (3, 5))
    }

    @Test func aSecondStoreOnTheSameFilesIsRefusedWhileTheFirstIsOpen() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        expectStatus(.notAvailable) { _ = try ItemStore(configuration: TemporaryStore.configuration(t.directory)) }
    }

    @Test func writesUseWriteAheadLoggingWithFullSync() throws {
        let t = try TemporaryStore()
        let mode = try t.store.database.query("PRAGMA journal_mode") { (s) throws(KeychainError) in try s.step() ? s.text(0) : "" }
        #expect(mode == "wal")
        let sync = try t.store.database.query("PRAGMA synchronous") { (s) throws(KeychainError) in try s.step() ? s.int(0) : -1 }
        #expect(sync == 2)  // FULL
    }

    func mode(_ path: String) throws -> mode_t {
        var st = stat()
        guard stat(path, &st) == 0 else { throw KeychainError(.io, "no \(path)") }
        return st.st_mode & 0o777
    }
}

@Suite("Bad input gets a clear code and writes nothing")
struct BadInputTests {
    func expectNothingWritten(_ t: TemporaryStore, _ status: KeychainStatus, _ dict: AttributeDictionary,
                              sourceLocation: SourceLocation = #_sourceLocation) throws {
        let before = try t.store.itemCount()
        expectStatus(status, sourceLocation: sourceLocation) { try t.add(dict) }
        #expect(try t.store.itemCount() == before, sourceLocation: sourceLocation)
    }

    @Test func unknownAttributeIsNoSuchAttribute() throws {
        let t = try TemporaryStore()
        try expectNothingWritten(t, .noSuchAttribute, genp("s", "a", ["zzzz": .string("x")]))
        try expectNothingWritten(t, .noSuchAttribute, genp("s", "a", ["srvr": .string("x")]))
    }

    @Test func missingOrUnknownClass() throws {
        let t = try TemporaryStore()
        try expectNothingWritten(t, .param, ["acct": .string("a")])
        try expectNothingWritten(t, .noSuchClass, ["class": .string("apls")])
    }

    @Test func wrongValueTypes() throws {
        let t = try TemporaryStore()
        try expectNothingWritten(t, .param, genp("s", "a", ["v_Data": .string("secret as a string")]))
        try expectNothingWritten(t, .param, genp("s", "a", ["acct": .date(5)]))
        try expectNothingWritten(t, .param, genp("s", "a", ["pdmn": .string("sometimes")]))
        try expectNothingWritten(t, .param, genp("s", "a", ["r_Data": .string("yes")]))
    }

    @Test func oversizedSecretIsRejectedNotTruncated() throws {
        let t = try TemporaryStore()
        try expectNothingWritten(t, .param, genp("s", "a", ["v_Data": .data([UInt8](repeating: 1, count: KeychainLimits.maxSecretBytes + 1))]))
    }

    @Test func invalidUTF8InAStringAttribute() throws {
        let t = try TemporaryStore()
        try expectNothingWritten(t, .param, genp("s", "a", ["agrp": .data([0xC3, 0x28])]))
    }

    @Test func matchOptionsInAddAreRejectedInsteadOfIgnored() throws {
        let t = try TemporaryStore()
        try expectNothingWritten(t, .param, genp("s", "a", ["m_Limit": .string("m_LimitAll")]))
    }
}
