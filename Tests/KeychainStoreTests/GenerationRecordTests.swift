#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainCrypto
import KeychainModel
import Testing
@testable import KeychainStore
import StoreTestSupport

/// The record of the database's generation kept beside it: what it says and when.
@Suite("The generation record")
struct GenerationRecordTests {
    func record(_ t: TemporaryStore, key: SecureKey) throws -> GenerationRecord? {
        try GenerationRecordFile(path: t.directory + "/keychain.generation", deviceKey: key).read()
    }

    @Test func itSaysRunningWithTheGenerationOfTheStartWhileTheStoreIsOpen() throws {
        let t = try TemporaryStore()
        let key = t.store.deviceKey
        let atStart = try t.store.table.generation()
        try t.add(genp("s", "a"))
        #expect(try record(t, key: key) == GenerationRecord(state: .running, generation: atStart))
    }

    @Test func itSaysCleanWithTheLastGenerationOnceTheStoreIsClosed() throws {
        let t = try TemporaryStore()
        let key = t.store.deviceKey
        try t.add(genp("s", "a"))
        let last = try t.store.table.generation()
        t.store = nil
        #expect(try record(t, key: key) == GenerationRecord(state: .clean, generation: last))
    }

    @Test func aCleanStopLeavesNoWriteAheadLogBehind() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        t.store = nil
        var st = stat()
        #expect(lstat(t.directory + "/keychain.db-wal", &st) != 0 || st.st_size == 0)
    }

    @Test func itIsPrivateAndLeavesNoTemporaryFile() throws {
        let t = try TemporaryStore()
        t.store = nil
        var st = stat()
        #expect(lstat(t.directory + "/keychain.generation", &st) == 0 && st.st_mode & 0o777 == 0o600)
        let names = try FileManager.default.contentsOfDirectory(atPath: t.directory)
        #expect(!names.contains { $0.contains(".tmp") })
    }

    @Test func aRecordFromAnotherKeychainIsRefused() throws {
        let t = try TemporaryStore()
        let other = try TemporaryStore()
        t.store = nil
        other.store = nil
        rename(other.directory + "/keychain.generation", t.directory + "/keychain.generation")
        expectStatus(.decode) { try t.reopen() }
    }
}
