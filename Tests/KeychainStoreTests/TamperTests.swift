#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainStore
import KeychainStorage
import Testing
import StoreTestSupport

@Suite("An edited database file fails item by item, with errSecDecode")
struct TamperTests {
    /// Two items, "victim" and "bystander", both in the app's first group.
    func twoItems() throws -> TemporaryStore {
        let t = try TemporaryStore()
        try t.add(genp("s", "victim", ["v_Data": .data(bytes("victim secret"))]))
        try t.add(genp("s", "bystander", ["v_Data": .data(bytes("bystander secret"))]))
        return t
    }

    /// Runs SQL against the file directly, as an attacker with the file would.
    func edit(_ t: TemporaryStore, _ sql: String) throws {
        try t.editFile { try $0.execute(sql) }
    }

    let victimRow = "(SELECT min(rowid) FROM items)"

    /// XORs the low bit of one byte of the victim's `column`. A flip always changes the byte;
    /// setting it to a value left it unchanged whenever it already held that value (1 run in
    /// 256 for a ciphertext byte: docs/flakes.md).
    func flipBit(_ t: TemporaryStore, column: String, byte offset: Int) throws {
        try t.editFile { db in
            var blob = try db.query("SELECT \(column) FROM items WHERE rowid = \(victimRow)") { (s) throws(KeychainError) in
                try s.step() ? s.blob(0) : []
            }
            try #require(blob.count > offset, "the victim's \(column) has \(blob.count) bytes")
            blob[offset] ^= 0x01
            try db.run("UPDATE items SET \(column) = ? WHERE rowid = \(victimRow)", [.blob(blob)])
        }
    }

    func expectVictimDecodeAndBystanderFine(_ t: TemporaryStore) throws {
        expectStatus(.decode) { _ = try t.secret(genp("s", "victim")) }
        #expect(try t.secret(genp("s", "bystander")) == bytes("bystander secret"))
        // A search over both returns the intact item only.
        #expect(try t.count(["class": .string("genp"), "svce": .string("s")]) == 1)
    }

    @Test func flippedCiphertextByteIsDecodeForThatItemOnly() throws {
        let t = try twoItems()
        try flipBit(t, column: "data", byte: 100)
        try expectVictimDecodeAndBystanderFine(t)
    }

    @Test func truncatedBlobIsDecode() throws {
        let t = try twoItems()
        try edit(t, "UPDATE items SET data = substr(data, 1, 10) WHERE rowid = \(victimRow)")
        try expectVictimDecodeAndBystanderFine(t)
    }

    @Test func changedProtectionClassIsDecode() throws {
        let t = try twoItems()
        try edit(t, "UPDATE items SET pdmn = 'dk' WHERE rowid = \(victimRow)")
        try expectVictimDecodeAndBystanderFine(t)
    }

    @Test func unknownProtectionClassIsDecode() throws {
        let t = try twoItems()
        try edit(t, "UPDATE items SET pdmn = 'zz' WHERE rowid = \(victimRow)")
        try expectVictimDecodeAndBystanderFine(t)
    }

    @Test func changedAccessGroupIsDecode() throws {
        let t = try twoItems()
        // Moved into another group the caller can see: still refused, the blob names the old one.
        try edit(t, "UPDATE items SET agrp = 'com.example.shared' WHERE rowid = \(victimRow)")
        expectStatus(.decode) { _ = try t.secret(genp("s", "victim", ["agrp": .string("com.example.shared")])) }
        #expect(try t.secret(genp("s", "bystander")) == bytes("bystander secret"))
    }

    @Test func ciphertextMovedToAnotherRowIsDecode() throws {
        let t = try twoItems()
        try edit(t, """
            UPDATE items SET data = (SELECT data FROM items WHERE rowid = (SELECT max(rowid) FROM items))
            WHERE rowid = \(victimRow)
            """)
        expectStatus(.decode) { _ = try t.secret(genp("s", "victim")) }
    }

    @Test func editedLookupColumnIsDecode() throws {
        let t = try twoItems()
        // Point the victim's service hash at another service's value: a search by the new
        // value finds the row, and the row refuses to open.
        try t.add(genp("elsewhere", "x"))
        try edit(t, """
            UPDATE items SET h_svce = (SELECT h_svce FROM items WHERE rowid = (SELECT max(rowid) FROM items))
            WHERE rowid = \(victimRow)
            """)
        expectStatus(.decode) { _ = try t.secret(["class": .string("genp"), "acct": .string("victim")]) }
    }

    @Test func addReplacesAnAlteredRowHoldingItsPrimaryKey() throws {
        let t = try twoItems()
        try edit(t, "UPDATE items SET data = X'0102' WHERE rowid = \(victimRow)")
        try t.add(genp("s", "victim", ["v_Data": .data(bytes("fresh"))]))
        #expect(try t.secret(genp("s", "victim")) == bytes("fresh"))
    }

    @Test func deleteRemovesAnAlteredRow() throws {
        let t = try twoItems()
        try edit(t, "UPDATE items SET data = X'0102' WHERE rowid = \(victimRow)")
        try t.store.items.delete(genp("s", "victim"), scope: TemporaryStore.app)
        #expect(try t.store.itemCount() == 1)
    }

    @Test func databaseHoldsNoServiceAccountLabelOrSecretInClear() throws {
        let t = try TemporaryStore()
        try t.add(genp("very-distinct-service", "very-distinct-account",
                       ["labl": .string("very-distinct-label"), "v_Data": .data(bytes("very-distinct-secret"))]))
        try t.editFile { try $0.execute("PRAGMA wal_checkpoint(FULL)") }
        let fileBytes = try readFile(t.directory + "/keychain.db") + (try? readFile(t.directory + "/keychain.db-wal") ?? [])!
        for needle in ["very-distinct-service", "very-distinct-account", "very-distinct-label", "very-distinct-secret"] {
            #expect(!contains(fileBytes, bytes(needle)), "\(needle) found in the database file")
        }
    }
}

func readFile(_ path: String) throws -> [UInt8] {
    guard let f = fopen(path, "rb") else { throw KeychainError(.io, "cannot open \(path)") }
    defer { fclose(f) }
    var out: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = fread(&buffer, 1, buffer.count, f)
        if n <= 0 { break }
        out += buffer[0..<n]
    }
    return out
}

func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
    guard needle.count <= haystack.count else { return false }
    for i in 0...(haystack.count - needle.count) where haystack[i] == needle[0] {
        if Array(haystack[i..<(i + needle.count)]) == needle { return true }
    }
    return false
}
