internal import CSQLite
import KeychainModel

/// A value bound to or read from SQLite.
public enum SQLValue: Sendable, Equatable {
    case null
    case int(Int64)
    case double(Double)
    case text(String)
    case blob([UInt8])
}

/// One SQLite connection with a cache of prepared statements. Not thread-safe: exactly one
/// owner uses it (the store, serialised by the daemon).
public final class SQLiteDatabase {
    private var handle: OpaquePointer?
    /// Statements by SQL text and by shape (`query(shape:...)`). Bounded, because callers choose
    /// the shapes: every combination of attributes a query names is a statement of its own.
    private var cache = LRUCache<String, Statement>(capacity: statementCacheCapacity)
    private var shapeCache = LRUCache<UInt64, Statement>(capacity: statementCacheCapacity)
    /// Statements kept prepared in each cache. The daemon's own fixed SQL is about 30 texts and
    /// an app's lookups use a few shapes (a get by service and account, a list by service...),
    /// so 128 keeps every statement a steady workload uses, with room for many apps. A lookup
    /// statement holds about 13 KB (100,000 of them grew the daemon's heap by 1.25 GB), so the
    /// two caches stay within a few MB whatever callers send (docs/performance.md).
    static let statementCacheCapacity = 128
    public let path: String
    /// SQL run inside every outermost transaction just before it commits (the generation
    /// counter: ItemTable.countTransactions); nil until the schema is in place.
    public var beforeEveryCommit: String?

    /// Opens (creating if needed) the database at `path`; durable settings: WAL with
    /// synchronous=FULL, so an acknowledged commit survives power loss.
    public init(path: String) throws(KeychainError) {
        self.path = path
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        handle = db
        guard rc == SQLITE_OK else {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            handle = nil
            throw Self.failure(rc, "cannot open database \(path): \(message)")
        }
        sqlite3_extended_result_codes(db, 1)
        // Only keychaind opens this file: holding its lock for the connection's life saves
        // two fcntl calls per transaction, keeps the WAL index in private memory rather than
        // a shared -shm file, and stops a second daemon on the same state directory.
        try execute("PRAGMA locking_mode=EXCLUSIVE")
        try execute("PRAGMA journal_mode=WAL")
        try execute("PRAGMA synchronous=FULL")
        try execute("PRAGMA foreign_keys=ON")
        try execute("PRAGMA secure_delete=ON")
        // Reads of a large keychain should not cost a pread each: a 32 MiB page cache, and the
        // file mapped (up to 256 MiB) so that cache misses are page faults, not system calls.
        try execute("PRAGMA cache_size=-32768")
        try execute("PRAGMA mmap_size=268435456")
        // Checkpoint every 10,000 WAL pages (~40 MiB) rather than SQLite's 1,000: in a large
        // keychain each write dirties index pages far apart, and a longer WAL lets a checkpoint
        // copy a page once for many writes (100k items, 8 clients: adds 5.7k -> 6.8k/s, p99
        // 7.7 -> 3.3 ms; docs/performance.md).
        try execute("PRAGMA wal_autocheckpoint=10000")
        // No busy time-out: the only other holder of the lock would be another keychaind on
        // the same files, which holds it for its whole life. Fail at once instead.
    }

    deinit {
        shapeCache.removeAll()
        cache.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Runs SQL that returns no rows (several statements allowed).
    public func execute(_ sql: String) throws(KeychainError) {
        var errmsg: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errmsg)
        if rc != SQLITE_OK {
            let message = errmsg.map { String(cString: $0) } ?? "error \(rc)"
            sqlite3_free(errmsg)
            throw Self.failure(rc, "SQLite: \(message)")
        }
    }

    /// Binds `values` to the cached statement for `sql`, hands it to `body` to step through,
    /// and resets it afterwards. The reset matters: a statement left mid-result keeps a read
    /// transaction open, pinning an old snapshot and blocking this connection's next write.
    public func query<T>(_ sql: String, _ values: [SQLValue] = [],
                         _ body: (Statement) throws(KeychainError) -> T) throws(KeychainError) -> T {
        let s = try statement(sql)
        defer { s.reset() }
        try s.bind(values)
        return try body(s)
    }

    /// Like `query(_:_:_:)`, for statements generated from a small description: the cache is
    /// keyed by `shape` (which must determine the SQL), so a hot lookup neither rebuilds nor
    /// hashes its SQL text; `sql` runs only on the first use of a shape.
    public func query<T>(shape: UInt64, sql: () -> String, _ values: [SQLValue],
                         _ body: (Statement) throws(KeychainError) -> T) throws(KeychainError) -> T {
        let s: Statement
        if let cached = shapeCache.value(for: shape) {
            s = cached
        } else {
            s = try prepare(sql())
            shapeCache.insert(s, for: shape)
        }
        defer { s.reset() }
        try s.bind(values)
        return try body(s)
    }

    /// Runs a statement that returns no rows.
    public func run(_ sql: String, _ values: [SQLValue] = []) throws(KeychainError) {
        try query(sql, values) { (s) throws(KeychainError) in while try s.step() {} }
    }

    /// A cached prepared statement for `sql`, reset and with bindings cleared.
    func statement(_ sql: String) throws(KeychainError) -> Statement {
        if let s = cache.value(for: sql) {
            s.reset()
            return s
        }
        let s = try prepare(sql)
        cache.insert(s, for: sql)
        return s
    }

    /// A new statement (finalized when the last reference goes: an evicted statement that a
    /// query is still stepping lives until that query is done).
    private func prepare(_ sql: String) throws(KeychainError) -> Statement {
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else {
            throw Self.failure(rc, "SQLite cannot prepare a statement: \(lastMessage)")
        }
        return Statement(stmt, database: self)
    }

    /// How many statements each cache holds (for tests).
    var cachedStatementCounts: (texts: Int, shapes: Int) { (cache.count, shapeCache.count) }

    /// How many statements of this connection are not finalized, cached or not (for tests).
    var preparedStatementCount: Int {
        var n = 0
        var stmt = sqlite3_next_stmt(handle, nil)
        while let s = stmt {
            n += 1
            stmt = sqlite3_next_stmt(handle, s)
        }
        return n
    }

    /// Runs `body` in one IMMEDIATE transaction: all of it is committed, or none of it.
    /// Inside an enclosing transaction (a group commit of several calls) it becomes a
    /// savepoint, so one call's failure undoes that call alone.
    public func transaction<T>(_ body: () throws(KeychainError) -> T) throws(KeychainError) -> T {
        let nested = sqlite3_get_autocommit(handle) == 0
        try execute(nested ? "SAVEPOINT call" : "BEGIN IMMEDIATE")
        do {
            let result = try body()
            if !nested, let sql = beforeEveryCommit { try run(sql) }
            try execute(nested ? "RELEASE call" : "COMMIT")
            return result
        } catch {
            if nested {
                try? execute("ROLLBACK TO call")
                try? execute("RELEASE call")
            } else {
                try? execute("ROLLBACK")
            }
            throw error
        }
    }

    public var userVersion: Int {
        get throws(KeychainError) {
            try query("PRAGMA user_version") { (s) throws(KeychainError) in try s.step() ? Int(s.int(0)) : 0 }
        }
    }

    public var changes: Int { Int(sqlite3_changes(handle)) }

    var lastMessage: String { String(cString: sqlite3_errmsg(handle)) }

    /// A failure SQLite reported as `rc`: the keychain's status for it, with the code itself
    /// kept as the underlying error.
    static func failure(_ rc: Int32, _ message: String) -> KeychainError {
        KeychainError(status(for: rc), message, underlying: SQLiteFailure(code: rc))
    }

    /// Maps SQLite result codes to the keychain's, as securityd does (keychain-semantics.md 5).
    static func status(for rc: Int32) -> KeychainStatus {
        switch rc & 0xFF {
        case SQLITE_CONSTRAINT: constraintStatus(for: rc)
        case SQLITE_NOMEM: .allocate
        case SQLITE_READONLY: .readOnly
        case SQLITE_IOERR: .io
        case SQLITE_CORRUPT, SQLITE_NOTADB: .decode
        case SQLITE_FULL, SQLITE_PERM, SQLITE_CANTOPEN, SQLITE_AUTH, SQLITE_BUSY, SQLITE_LOCKED: .notAvailable
        case SQLITE_MISMATCH: .noSuchAttribute
        default: .internal
        }
    }

    /// Only a second row with the same key is a duplicate item; the extended code says which
    /// constraint failed (the connection has extended codes on). A NOT NULL, CHECK or foreign key
    /// failure is a row the store should never have written: errSecInternal, with SQLite's
    /// message naming the constraint, rather than an "already exists" that sends a caller to
    /// update an item that is not there.
    static func constraintStatus(for rc: Int32) -> KeychainStatus {
        switch rc {
        case primaryKeyConstraint, uniqueConstraint, rowidConstraint: .duplicateItem
        default: .internal
        }
    }

    // sqlite3.h's extended codes, which Swift does not import (macros built with `|` and `<<`).
    static let primaryKeyConstraint = SQLITE_CONSTRAINT | (6 << 8)  // SQLITE_CONSTRAINT_PRIMARYKEY
    static let uniqueConstraint = SQLITE_CONSTRAINT | (8 << 8)  // SQLITE_CONSTRAINT_UNIQUE
    static let rowidConstraint = SQLITE_CONSTRAINT | (10 << 8)  // SQLITE_CONSTRAINT_ROWID
}

/// SQLite's result code for a failed call (extended, e.g. SQLITE_BUSY_SNAPSHOT), carried as a
/// KeychainError's `underlying` error.
public struct SQLiteFailure: Error, Sendable, Equatable {
    public let code: Int32

    /// The primary result code (the low byte of an extended one).
    public var primaryCode: Int32 { code & 0xFF }

    /// Another connection holds the database's lock: with this daemon's exclusive locking,
    /// another keychaind on the same file.
    public var isLockedByAnotherConnection: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
}

/// A prepared statement. Bind with 1-based indexes; read columns with 0-based ones.
public final class Statement {
    private let stmt: OpaquePointer
    private unowned let database: SQLiteDatabase

    init(_ stmt: OpaquePointer, database: SQLiteDatabase) {
        self.stmt = stmt
        self.database = database
    }

    deinit { sqlite3_finalize(stmt) }

    func reset() {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    func bind(_ values: [SQLValue]) throws(KeychainError) {
        for (i, v) in values.enumerated() { try bind(v, at: Int32(i + 1)) }
    }

    func bind(_ value: SQLValue, at index: Int32) throws(KeychainError) {
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(stmt, index)
        case .int(let i): rc = sqlite3_bind_int64(stmt, index, i)
        case .double(let d): rc = sqlite3_bind_double(stmt, index, d)
        case .text(let s): rc = sqlite3_bind_text(stmt, index, s, -1, csqlite_transient())
        case .blob(let b):
            // A zero-length blob must still be a blob (not NULL) so that it compares equal.
            rc = b.withUnsafeBytes { sqlite3_bind_blob(stmt, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count), csqlite_transient()) }
        }
        guard rc == SQLITE_OK else {
            throw SQLiteDatabase.failure(rc, "SQLite cannot bind parameter \(index)")
        }
    }

    /// Advances; true when a row is available, false when done.
    public func step() throws(KeychainError) -> Bool {
        let rc = sqlite3_step(stmt)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let message = database.lastMessage
            sqlite3_reset(stmt)
            throw SQLiteDatabase.failure(rc, "SQLite: \(message)")
        }
    }

    public func int(_ col: Int32) -> Int64 { sqlite3_column_int64(stmt, col) }
    public func double(_ col: Int32) -> Double { sqlite3_column_double(stmt, col) }
    public func isNull(_ col: Int32) -> Bool { sqlite3_column_type(stmt, col) == SQLITE_NULL }

    public func text(_ col: Int32) -> String {
        guard let p = sqlite3_column_text(stmt, col) else { return "" }
        return String(cString: p)
    }

    public func blob(_ col: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(stmt, col))
        guard n > 0, let p = sqlite3_column_blob(stmt, col) else { return [] }
        return Array(UnsafeRawBufferPointer(start: p, count: n))
    }
}
