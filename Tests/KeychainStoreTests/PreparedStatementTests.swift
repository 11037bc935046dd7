import KeychainModel
import Testing
@testable import KeychainStorage

/// The connection's statement caches, bounded so that no caller can grow the daemon by sending
/// distinct queries.
@Suite("The prepared statements of a connection")
struct PreparedStatementTests {
    let capacity = SQLiteDatabase.statementCacheCapacity

    func select(_ db: SQLiteDatabase, _ n: Int) throws -> Int64 {
        try db.query("SELECT \(n)") { (s) throws(KeychainError) in try s.step() ? s.int(0) : -1 }
    }

    func select(_ db: SQLiteDatabase, shape n: Int) throws -> Int64 {
        try db.query(shape: UInt64(n), sql: { "SELECT \(n)" }, []) { (s) throws(KeychainError) in try s.step() ? s.int(0) : -1 }
    }

    @Test func manyDistinctStatementsLeaveEachCacheWithinItsCapacity() throws {
        let db = try SQLiteDatabase(path: ":memory:")
        for n in 0..<(3 * capacity) {
            _ = try select(db, n)
            _ = try select(db, shape: n)
        }
        #expect(db.cachedStatementCounts.texts == capacity)
        #expect(db.cachedStatementCounts.shapes == capacity)
    }

    @Test func anEvictedStatementIsFinalized() throws {
        let db = try SQLiteDatabase(path: ":memory:")
        for n in 0..<(3 * capacity) {
            _ = try select(db, n)
            _ = try select(db, shape: n)
        }
        #expect(db.preparedStatementCount == 2 * capacity)
    }

    @Test func aStatementUsedBetweenOthersStaysCached() throws {
        let db = try SQLiteDatabase(path: ":memory:")
        let first = try db.statement("SELECT -1")
        for n in 0..<(3 * capacity) {
            _ = try select(db, n)
            #expect(try db.statement("SELECT -1") === first)
        }
    }

    @Test func anEvictedStatementWorksWhenUsedAgain() throws {
        let db = try SQLiteDatabase(path: ":memory:")
        #expect(try select(db, 7) == 7)
        #expect(try select(db, shape: 7) == 7)
        for n in 1_000..<(1_000 + 2 * capacity) {
            _ = try select(db, n)
            _ = try select(db, shape: n)
        }
        #expect(try select(db, 7) == 7)
        #expect(try select(db, shape: 7) == 7)
    }

    /// A query's body may run other queries (an add looks up the primary key's holder inside
    /// its transaction): evicting the statement it is stepping must not finalize it under it.
    @Test func aStatementEvictedWhileSteppedFinishesItsRows() throws {
        let db = try SQLiteDatabase(path: ":memory:")
        let sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5) SELECT x FROM c"
        let rows = try db.query(sql) { (s) throws(KeychainError) -> [Int64] in
            var rows: [Int64] = []
            while try s.step() {
                rows.append(s.int(0))
                for n in 0..<(2 * capacity) { _ = try? select(db, rows.count * 10_000 + n) }
            }
            return rows
        }
        #expect(rows == [1, 2, 3, 4, 5])
    }
}
