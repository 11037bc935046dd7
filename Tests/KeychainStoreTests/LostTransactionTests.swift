import Foundation
import KeychainModel
import Testing
@testable import KeychainStore
import StoreTestSupport

/// What is on disk at a given moment, copied into a state directory of its own: taken while a
/// store is open, it is what a crash at that moment (a power loss, SIGKILL) would leave.
final class DiskImage {
    let scratch: Scratch
    var directory: String { scratch.state }

    init(of directory: String) throws {
        scratch = try Scratch()
        try scratch.mkdir("state")
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            let data = try Data(contentsOf: URL(fileURLWithPath: directory + "/" + name))
            guard FileManager.default.createFile(atPath: scratch.file(name), contents: data,
                                                 attributes: [.posixPermissions: 0o600]) else {
                throw KeychainError(.io, "cannot copy \(name)")
            }
        }
    }

    func open() throws -> ItemStore { try scratch.open() }
}

/// A database that lost committed transactions (its write-ahead log truncated or deleted, the
/// file replaced by an older copy) is refused at start, not served as if nothing happened.
@Suite("Committed transactions that go missing are noticed")
struct LostTransactionTests {
    func contents(_ path: String) throws -> Data { try Data(contentsOf: URL(fileURLWithPath: path)) }

    func expectLoss(_ error: KeychainError?, of count: Int, recordIn directory: String,
                    sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(error?.status == .decode, "\(String(describing: error))", sourceLocation: sourceLocation)
        let lost = "lost \(count) committed transaction\(count == 1 ? "" : "s")"
        #expect(error?.message.contains(lost) == true, "no \"\(lost)\" in \(String(describing: error))", sourceLocation: sourceLocation)
        #expect(error?.message.contains("remove \(directory)/keychain.generation") == true,
                "\(String(describing: error))", sourceLocation: sourceLocation)
    }

    @Test func anOlderCopyOfTheDatabaseAfterACleanStopIsRefused() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "first"))
        t.store = nil
        let older = try contents(t.directory + "/keychain.db")
        try t.reopen()
        try t.add(genp("s", "second"))
        try t.add(genp("s", "third"))
        t.store = nil
        try older.write(to: URL(fileURLWithPath: t.directory + "/keychain.db"))
        expectLoss(refusal { try t.reopen() }, of: 2, recordIn: t.directory)
    }

    @Test func aRefusedStartDoesNotVouchForTheDatabaseAtTheNext() throws {
        let t = try TemporaryStore()
        t.store = nil
        let older = try contents(t.directory + "/keychain.db")
        try t.reopen()
        try t.add(genp("s", "lost"))
        t.store = nil
        try older.write(to: URL(fileURLWithPath: t.directory + "/keychain.db"))
        expectLoss(refusal { try t.reopen() }, of: 1, recordIn: t.directory)
        expectLoss(refusal { try t.reopen() }, of: 1, recordIn: t.directory)
    }

    @Test func aCrashLosesNothingAndIsNotTakenForALoss() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "first"))
        try t.reopen()
        try t.add(genp("s", "second"))
        let crashed = try DiskImage(of: t.directory)
        let store = try crashed.open()
        #expect(try store.itemCount() == 2)
    }

    enum Damage: String, CaseIterable { case deleted, truncatedToItsHeader }

    /// Transactions that a crashed run left in the write-ahead log are counted at the next
    /// start; if that run crashes too and the log is then lost, so are they, and it shows.
    @Test(arguments: Damage.allCases)
    func aWriteAheadLogLostAfterTwoCrashesIsRefused(damage: Damage) throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "first"))
        try t.reopen()  // clean: everything so far is in keychain.db itself
        try t.add(genp("s", "second"))
        try t.add(genp("s", "third"))
        let firstCrash = try DiskImage(of: t.directory)
        let restarted = try firstCrash.open()
        #expect(try restarted.itemCount() == 3)
        let secondCrash = try DiskImage(of: firstCrash.directory)
        let wal = secondCrash.directory + "/keychain.db-wal"
        switch damage {
        case .deleted: unlink(wal)
        case .truncatedToItsHeader: truncate(wal, 32)
        }
        expectLoss(refusal { _ = try secondCrash.open() }, of: 2, recordIn: secondCrash.directory)
    }

    @Test func anEditedRecordIsRefused() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "first"))
        t.store = nil
        let path = t.directory + "/keychain.generation"
        var record = [UInt8](try contents(path))
        record[12] ^= 1  // the low byte of the generation
        try Data(record).write(to: URL(fileURLWithPath: path))
        let error = refusal { try t.reopen() }
        #expect(error?.status == .decode)
        #expect(error?.message.contains(path) == true && error?.message.contains("authentication") == true, "\(String(describing: error))")
    }

    @Test func removingTheRecordAcceptsTheDatabaseAsItIs() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "first"))
        t.store = nil
        let older = try contents(t.directory + "/keychain.db")
        try t.reopen()
        try t.add(genp("s", "second"))
        t.store = nil
        try older.write(to: URL(fileURLWithPath: t.directory + "/keychain.db"))
        unlink(t.directory + "/keychain.generation")
        try t.reopen()
        #expect(try t.count(["class": .string("genp")]) == 1)
        #expect(try t.secret(genp("s", "first")) != nil)
    }

    @Test func aDatabaseAheadOfAnOlderRecordLostNothingAndIsServed() throws {
        let t = try TemporaryStore()
        t.store = nil
        let olderRecord = try contents(t.directory + "/keychain.generation")
        try t.reopen()
        try t.add(genp("s", "first"))
        t.store = nil
        try olderRecord.write(to: URL(fileURLWithPath: t.directory + "/keychain.generation"))
        try t.reopen()
        #expect(try t.count(["class": .string("genp")]) == 1)
    }

    @Test func aRecordLeftWhereTheKeychainWasDeletedIsRefused() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "first"))
        t.store = nil
        unlink(t.directory + "/keychain.db")
        unlink(t.directory + "/device.key")
        let error = refusal { try t.reopen() }
        #expect(error?.status == .notAvailable)
        #expect(error?.message.contains("remove \(t.directory)/keychain.generation") == true, "\(String(describing: error))")
        #expect(!FileManager.default.fileExists(atPath: t.directory + "/device.key"))
    }
}
