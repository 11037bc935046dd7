import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Backups between two daemons with different state directories, so different device keys:
/// two "devices".
@Suite("Encrypted backup, restore and migration", .serialized)
struct BackupTests {
    static let appConfig = """
        [[app]]
        id = "app"
        uids = [0]
        groups = ["app.private", "app.shared"]
        """
    let password = bytes("backup password")

    func devices() throws -> (RunningDaemon, RunningDaemon, KeychainConnection, KeychainConnection) {
        let a = try RunningDaemon(config: Self.appConfig)
        let b = try RunningDaemon(config: Self.appConfig)
        return (a, b, KeychainConnection(socketPath: a.socketPath), KeychainConnection(socketPath: b.socketPath))
    }

    func item(_ pdmn: Protection) -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("svc-\(pdmn.rawValue)"), "acct": .string("acct-\(pdmn.rawValue)")]
    }

    /// One item per protection class, in the shared group, with distinctive values.
    func fill(_ c: KeychainConnection) throws {
        try c.setPasscode(bytes("1234"))  // akpu items need one
        for pdmn in Protection.allCases {
            try c.add(item(pdmn).merging([
                "pdmn": .string(pdmn.rawValue), "agrp": .string("app.shared"), "labl": .string("label-\(pdmn.rawValue)"),
                "v_Data": .data(bytes("secret-\(pdmn.rawValue)") + [0, 255]),
            ]) { $1 })
        }
    }

    func count(_ c: KeychainConnection) throws -> Int {
        do {
            guard case .list(let all) = try c.copyMatching(["class": .string("genp"), "m_Limit": .string("m_LimitAll"),
                                                             "r_PersistentRef": .bool(true)]) else { return -1 }
            return all.count
        } catch {
            if error.status == .itemNotFound { return 0 }
            throw error
        }
    }

    @Test func exactlyTheMigratableItemsArriveOnAnotherDeviceByteForByte() throws {
        let (a, b, ca, cb) = try devices()
        try fill(ca)
        // Through the CLI, as a user would.
        let file = a.root + "/backup.kcb"
        let made = try a.cli(["backup", "--out", file, "--json"], input: password + [10])
        #expect(made.status == Exit.success, "\(made.stderr)")
        #expect(made.text.contains("\"excluded\":4") && made.text.contains("\"items\":3"))
        let restored = try b.cli(["restore", file, "--json"], input: password + [10])
        #expect(restored.status == Exit.success, "\(restored.stderr)")
        #expect(restored.text.contains("\"restored\":3"))
        for pdmn in Protection.allCases {
            let query = item(pdmn).merging(["r_Attributes": .bool(true), "r_Data": .bool(true)]) { $1 }
            if pdmn.isThisDeviceOnly {
                expectStatus(.itemNotFound) { _ = try cb.copyMatching(query) }
            } else {
                guard case .single(.attributes(let attrs)) = try cb.copyMatching(query) else {
                    Issue.record("\(pdmn) did not arrive")
                    continue
                }
                #expect(attrs["v_Data"] == .data(bytes("secret-\(pdmn.rawValue)") + [0, 255]))
                #expect(attrs["agrp"] == .string("app.shared"))
                #expect(attrs["pdmn"] == .string(pdmn.rawValue))
                #expect(attrs["labl"] == .string("label-\(pdmn.rawValue)"))
            }
        }
        #expect(try count(cb) == 3)
        // Nothing of the ThisDeviceOnly items is in the file, in any form; nor any clear text.
        let raw = try Data(contentsOf: URL(fileURLWithPath: file))
        for pdmn in Protection.allCases {
            for value in ["secret-\(pdmn.rawValue)", "label-\(pdmn.rawValue)", "svc-\(pdmn.rawValue)", "acct-\(pdmn.rawValue)"] {
                #expect(raw.range(of: Data(value.utf8)) == nil, "\(value) is readable in the backup file")
            }
        }
        #expect(try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int == 0o600)
    }

    @Test func theClientLibraryBacksUpAndRestoresToo() throws {
        let (a, b, ca, cb) = try devices()
        defer { withExtendedLifetime((a, b)) {} }  // the daemons live as long as the test
        try ca.add(item(.always).merging(["v_Data": .data([1, 2, 3])]) { $1 })
        var seen = 0
        let (file, info) = try ca.backup(password: password) { done, _ in seen = done }
        #expect(info["items"] == .int(1) && seen == file.count)
        let summary = try cb.restore(file, password: password)
        #expect(summary["restored"] == .int(1))
        #expect(try cb.copyMatching(item(.always).merging(["r_Data": .bool(true)]) { $1 }) == .single(.data([1, 2, 3])))
    }

    @Test func aWrongPasswordRestoresNothing() throws {
        let (a, b, ca, cb) = try devices()
        defer { withExtendedLifetime((a, b)) {} }  // the daemons live as long as the test
        try fill(ca)
        let (file, _) = try ca.backup(password: password)
        expectStatus(.authFailed) { _ = try cb.restore(file, password: bytes("not it")) }
        #expect(try count(cb) == 0)
    }

    @Test func aTruncatedFileRestoresNothing() throws {
        let (a, b, ca, cb) = try devices()
        defer { withExtendedLifetime((a, b)) {} }  // the daemons live as long as the test
        try fill(ca)
        let (file, _) = try ca.backup(password: password)
        for length in [0, 8, 40, file.count / 2, file.count - 1] where length > 0 {
            do {
                _ = try cb.restore(Array(file.prefix(length)), password: password)
                Issue.record("a file cut to \(length) bytes was restored")
            } catch {
                #expect(error.status == .decode, "\(length): \(error)")
            }
        }
        #expect(try count(cb) == 0)
    }

    @Test func aFlippedBitAnywhereRestoresNothing() throws {
        let (a, b, ca, cb) = try devices()
        defer { withExtendedLifetime((a, b)) {} }  // the daemons live as long as the test
        try fill(ca)
        let (file, _) = try ca.backup(password: password)
        for position in stride(from: 0, to: file.count, by: max(1, file.count / 40)) {
            var damaged = file
            damaged[position] ^= 0x10
            do {
                _ = try cb.restore(damaged, password: password)
                Issue.record("a bit flipped at \(position) went unnoticed")
            } catch {
                #expect([.decode, .authFailed, .unimplemented].contains(error.status), "\(position): \(error)")
            }
        }
        #expect(try count(cb) == 0)
    }

    @Test func aFileFromANewerFormatSaysSo() throws {
        let (a, b, ca, cb) = try devices()
        defer { withExtendedLifetime((a, b)) {} }  // the daemons live as long as the test
        try ca.add(item(.always))
        var (file, _) = try ca.backup(password: password)
        file[8] = 2  // format version, little-endian u16 after the magic
        do {
            _ = try cb.restore(file, password: password)
            Issue.record("a newer format was accepted")
        } catch {
            #expect(error.status == .unimplemented)
            #expect(error.message.contains("newer"))
        }
    }

    @Test func conflictsFailBeforeWritingAnythingUnlessSkippedOrReplaced() throws {
        let (a, b, ca, cb) = try devices()
        defer { withExtendedLifetime((a, b)) {} }  // the daemons live as long as the test
        try ca.add(item(.always).merging(["v_Data": .data(bytes("from A"))]) { $1 })
        try ca.add(item(.afterFirstUnlock).merging(["v_Data": .data(bytes("only in A"))]) { $1 })
        try cb.add(item(.always).merging(["v_Data": .data(bytes("from B"))]) { $1 })
        let (file, _) = try ca.backup(password: password)
        expectStatus(.duplicateItem) { _ = try cb.restore(file, password: password) }
        #expect(try count(cb) == 1)
        let skipped = try cb.restore(file, password: password, onConflict: .skip)
        #expect(skipped["restored"] == .int(1) && skipped["skipped"] == .int(1))
        #expect(try cb.copyMatching(item(.always).merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(bytes("from B"))))
        let replaced = try cb.restore(file, password: password, onConflict: .replace)
        #expect(replaced["replaced"] == .int(2))
        #expect(try cb.copyMatching(item(.always).merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(bytes("from A"))))
        #expect(try count(cb) == 2)
    }

    @Test func aLockedKeychainCannotBeBackedUp() throws {
        let (a, b, ca, _) = try devices()
        defer { withExtendedLifetime(b) {} }
        try fill(ca)
        try a.restart()
        expectStatus(.interactionNotAllowed) { _ = try ca.backup(password: password) }
    }

    @Test func aRestoreKilledMidwayLeavesAllOrNothing() throws {
        let (a, b, ca, cb) = try devices()
        // Many items, added by 4 clients at once (group commits), so the restore takes a while.
        let socket = a.socketPath
        DispatchQueue.concurrentPerform(iterations: 4) { worker in
            let c = KeychainConnection(socketPath: socket)
            for i in stride(from: worker, to: 2000, by: 4) {
                try? c.add(["class": .string("genp"), "svce": .string("bulk"), "acct": .string("a\(i)"),
                            "pdmn": .string("dk"), "v_Data": .data(Array(repeating: UInt8(i & 255), count: 64))])
            }
        }
        _ = ca
        let (file, info) = try KeychainConnection(socketPath: a.socketPath).backup(password: password)
        #expect(info["items"] == .int(2000))
        let path = a.root + "/bulk.kcb"
        try Data(file).write(to: URL(fileURLWithPath: path))
        for delay in [5_000, 30_000, 80_000, 200_000] as [UInt32] {
            let restore = Process()
            restore.executableURL = URL(fileURLWithPath: Binaries.keychain)
            restore.arguments = ["--socket", b.socketPath, "restore", "--on-conflict", "skip", path]
            let input = Pipe()
            restore.standardInput = input
            restore.standardError = FileHandle.nullDevice
            try restore.run()
            try? input.fileHandleForWriting.write(contentsOf: Data(password + [10]))
            try input.fileHandleForWriting.close()
            usleep(delay)
            b.crash()
            restore.waitUntilExit()
            try b.start()
            let n = try count(cb)
            #expect(n == 0 || n == 2000, "after a kill at \(delay) µs: \(n) items")
            if n == 2000 { break }
        }
    }
}
