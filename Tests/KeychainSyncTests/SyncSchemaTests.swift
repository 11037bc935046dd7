import KeychainModel
import KeychainStorage
import KeychainSync
import StoreTestSupport
import Testing
@testable import KeychainStore

@Suite("Schema version 6: sync")
struct SyncSchemaTests {
    static let syncTables = ["sync_circle", "sync_heads_seen", "sync_identity", "sync_inbox", "sync_keys", "sync_outbox", "sync_roster", "sync_writers_seen"]

    func syncTables(_ t: TemporaryStore) throws -> [String] {
        try t.store.database.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'sync\\_%' ESCAPE '\\' ORDER BY name") { (s) throws(KeychainError) in
            var names: [String] = []
            while try s.step() { names.append(s.text(0)) }
            return names
        }
    }

    @Test func aVersionFiveDatabaseGainsTheSyncTablesAndQueuesItsSynchronizableItems() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["sync": .int(1), "v_Data": .data([1])]))
        try t.add(genp("s", "b", ["v_Data": .data([2])]))
        try t.add(genp("s", "c", ["pdmn": .string("cku")]))
        try t.editFile { db in
            try undoSchemaV6(db)
            // Only an edited row can be ThisDeviceOnly and sync = 1; the migration queues none.
            try db.execute("UPDATE items SET sync = 1 WHERE pdmn = 'cku'")
        }
        #expect(try t.store.database.userVersion == Schema.currentVersion)
        #expect(try syncTables(t) == Self.syncTables)
        #expect(try t.secret(genp("s", "a", ["sync": .int(1)])) == [1])
        #expect(try t.secret(genp("s", "b")) == [2])
        let entries = try OutboxTable(t.store.database).entries()
        #expect(entries.count == 1)
        let a = try t.store.database.query("SELECT rowid FROM items WHERE sync = 1 AND pdmn = 'ak'") { (s) throws(KeychainError) in
            try s.step() ? s.int(0) : -1
        }
        #expect(entries.first?.change == .version(item: a))
        // No item has been synced: none carries a stamp.
        try t.store.table.forEach(RowFilter(itemClass: .genericPassword, accessGroups: TemporaryStore.app.groups, sync: 1)) { row in
            #expect(row.replicaStamp == nil)
            return true
        }
    }

    @Test func aNewDatabaseIsAtTheLatestVersionWithEmptySyncTables() throws {
        let t = try TemporaryStore()
        #expect(Schema.currentVersion == 9)  // v9: the login slot (issue 26)
        #expect(try syncTables(t) == Self.syncTables)
        for table in Self.syncTables {
            let rows = try t.store.database.query("SELECT count(*) FROM \(table)") { (s) throws(KeychainError) in try s.step() ? s.int(0) : -1 }
            #expect(rows == 0, "\(table)")
        }
    }

    @Test func aVersionSixDatabaseGainsTheStampMdatAndKeepsItsStamps() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["sync": .int(1)]))
        try t.editFile { db in
            try undoSchemaV7(db)
            try db.run("UPDATE items SET sync_writer = ?, sync_counter = 4", [.blob(Array(repeating: 1, count: 16))])
        }
        #expect(try t.store.database.userVersion == Schema.currentVersion)
        var stamps: [ReplicaStamp?] = []
        try t.store.table.forEach(RowFilter(itemClass: .genericPassword, accessGroups: TemporaryStore.app.groups, sync: 1)) { row in
            stamps.append(row.replicaStamp)
            return true
        }
        #expect(stamps == [ReplicaStamp(writer: Array(repeating: 1, count: 16), counter: 4, mdat: nil)])
    }

    @Test func aVersionSevenDatabaseGainsTheHeadsSeenTableAndKeepsItsCircleRow() throws {
        let t = try TemporaryStore()
        let circle = SyncCircleRow(circleID: Array(repeating: 7, count: 16), epoch: 2, cursor: 40, counter: 9, state: "member")
        try SyncCircleTable(t.store.database).save(circle)
        try t.editFile { db in try undoSchemaV8(db) }
        #expect(try t.store.database.userVersion == Schema.currentVersion)
        #expect(try SyncCircleTable(t.store.database).row() == circle)
        #expect(try SyncHeadsSeenTable(t.store.database).heads().isEmpty)
        let writer = try SyncDeviceID(Array(repeating: 3, count: 16))
        try SyncHeadsSeenTable(t.store.database).raise([writer: SyncHeadPosition(counter: 5, rosterLength: 2)])
        try SyncHeadsSeenTable(t.store.database).raise([writer: SyncHeadPosition(counter: 4, rosterLength: 3)])
        #expect(try SyncHeadsSeenTable(t.store.database).heads() == [writer: SyncHeadPosition(counter: 5, rosterLength: 3)])
    }
}
