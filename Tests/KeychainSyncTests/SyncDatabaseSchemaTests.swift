import Foundation
import KeychainModel
import KeychainSync
import Testing

@Suite("SyncDatabase: the circle's tables in PostgreSQL")
struct SyncDatabaseSchemaTests {
    @Test func creatingTheSchemaTwiceKeepsWhatTheFirstHeld() throws {
        let cluster = try TestCluster()
        let db = SyncDatabase(try PostgresConnection(cluster.url))
        try db.createSchema()
        try db.connection.query("INSERT INTO sync_circles (circle_id, epoch) VALUES ($1, 1)", [.bytea(Array(repeating: 7, count: 16))])
        try db.createSchema()
        #expect(try db.connection.query("SELECT count(*)::int8 FROM sync_circles").rows == [[.int(1)]])
    }

    @Test func theStoreRefusesARecordIdOfTheWrongLength() throws {
        let cluster = try TestCluster()
        let db = SyncDatabase(try PostgresConnection(cluster.url))
        try db.createSchema()
        let circle = Array(repeating: UInt8(1), count: 16)
        try db.connection.query("INSERT INTO sync_circles (circle_id, epoch) VALUES ($1, 1)", [.bytea(circle)])
        expectError(.param) {
            try db.connection.query("""
                INSERT INTO sync_records VALUES ($1, $2, 1, 1, 0, $3, 1, false, $4)
                """, [.bytea(circle), .bytea([1, 2, 3]), .bytea(Array(repeating: 2, count: 16)), .bytea([])])
        }
    }

    @Test func theChannelIsTheCircleIdInLowercaseHexUnderOurPrefix() {
        let name = SyncDatabase.channel(circleID: [0x00, 0xAB, 0x10, 0xFF] + Array(repeating: 0xCD, count: 12))
        #expect(name == "keychaind_sync_00ab10ff" + String(repeating: "cd", count: 12))
        #expect(name.count == 47)
    }
}
