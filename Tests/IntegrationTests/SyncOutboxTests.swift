import Foundation
import KeychainClient
import KeychainModel
import KeychainStorage
import Testing

/// The store side of sync through the real daemon (docs/sync.md, 7.3): what a client's
/// SecItem calls leave in the outbox of a stopped daemon's database. Nothing leaves the
/// machine yet.
@Suite("Sync outbox through the daemon", .serialized)
struct SyncOutboxDaemonTests {
    static let item: AttributeDictionary = [
        "class": .string("genp"), "svce": .string("svc-marker-7f3a"), "acct": .string("acct-marker-7f3a"), "sync": .int(1),
    ]
    static let markers = ["svc-marker-7f3a", "acct-marker-7f3a", "secret-marker-7f3a", "label-marker-7f3a"]

    /// Every outbox row as text (SQLite's quote() of each column: blobs as hex), oldest first.
    static func outboxRows(_ d: RunningDaemon) throws -> [String] {
        let db = try SQLiteDatabase(path: d.stateDirectory + "/keychain.db")
        return try db.query("""
            SELECT quote(id) || ' ' || quote(item) || ' ' || quote(counter) || ' ' || quote(class) || ' ' || quote(pdmn)
                   || ' ' || quote(identity) || ' ' || quote(blob) || ' ' || quote(mdat) FROM sync_outbox ORDER BY id
            """) { (s) throws(KeychainError) in
            var rows: [String] = []
            while try s.step() { rows.append(s.text(0)) }
            return rows
        }
    }

    static func expectNoMarker(in row: String, sourceLocation: SourceLocation = #_sourceLocation) {
        for marker in markers {
            let hex = marker.utf8.map { String(format: "%02X", $0) }.joined()
            #expect(!row.contains(marker) && !row.contains(hex), "\(marker) in \(row)", sourceLocation: sourceLocation)
        }
    }

    @Test func anAddWithSyncLeavesExactlyOneOutboxRowHoldingNoPlaintext() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item.merging(["v_Data": .data(bytes("secret-marker-7f3a")), "labl": .string("label-marker-7f3a")]) { $1 })
        try c.update(Self.item, ["v_Data": .data(bytes("secret-marker-7f3a, changed"))])
        try c.add(["class": .string("genp"), "svce": .string("svc-marker-7f3a"), "acct": .string("not synced")])
        #expect(d.stop() == 0)
        let rows = try Self.outboxRows(d)
        #expect(rows.count == 1, "\(rows)")
        for row in rows { Self.expectNoMarker(in: row) }
    }

    @Test func deletingAnItemNeverSyncedLeavesTheOutboxEmpty() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item.merging(["v_Data": .data(bytes("secret-marker-7f3a"))]) { $1 })
        try c.delete(Self.item)
        #expect(d.stop() == 0)
        #expect(try Self.outboxRows(d).isEmpty)
    }

    @Test func deletingASyncedItemLeavesOneTombstoneHoldingNoPlaintext() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item.merging(["v_Data": .data(bytes("secret-marker-7f3a")), "labl": .string("label-marker-7f3a")]) { $1 })
        #expect(d.stop() == 0)
        do {  // what a push will do once there is one: the circle has this version
            let db = try SQLiteDatabase(path: d.stateDirectory + "/keychain.db")
            try db.run("UPDATE items SET sync_writer = ?, sync_counter = 1 WHERE sync = 1", [.blob(Array(repeating: 1, count: 16))])
            try db.run("DELETE FROM sync_outbox")
        }
        try d.start()
        try KeychainConnection(socketPath: d.socketPath).delete(Self.item)
        #expect(d.stop() == 0)
        let rows = try Self.outboxRows(d)
        #expect(rows.count == 1, "\(rows)")
        #expect(rows.first?.contains(" NULL NULL 'genp' 'ak' X'") == true, "\(rows)")  // a tombstone: no item
        for row in rows { Self.expectNoMarker(in: row) }
    }
}
