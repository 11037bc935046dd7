import KeychainModel

/// One row of the items table as stored: clear columns, keyed-hash lookup columns and the
/// sealed blob. What a stolen database file shows is exactly this.
public struct ItemRow: Sendable, Equatable {
    public var rowid: Int64 = 0
    public var itemClass: ItemClass
    public var persistentID: [UInt8]
    public var accessGroup: String
    /// nil when the stored pdmn is not one this keychaind knows: an edited row, which the
    /// store reports as errSecDecode.
    public var protection: Protection?
    public var sync: Int64
    public var created: Double
    public var modified: Double
    /// Keyed hashes by attribute code, for the class's column attributes.
    public var hashes: [String: [UInt8]]
    public var blob: [UInt8]
    /// The item's rows in the Secret Service attribute index (table item_attributes); nil:
    /// none to write (an insert), or unchanged (a replace). Never read back from the table.
    public var attributeHashes: [[UInt8]]?
    /// The last version of this item the sync circle has had from this device or sent to it;
    /// nil: the circle has never seen the item's record. Written by `insert`, kept by
    /// `replace` (a new local version is still the record the circle saw).
    public var replicaStamp: ReplicaStamp?

    public init(itemClass: ItemClass, persistentID: [UInt8], accessGroup: String, protection: Protection?,
                sync: Int64, created: Double, modified: Double, hashes: [String: [UInt8]], blob: [UInt8]) {
        self.itemClass = itemClass
        self.persistentID = persistentID
        self.accessGroup = accessGroup
        self.protection = protection
        self.sync = sync
        self.created = created
        self.modified = modified
        self.hashes = hashes
        self.blob = blob
    }
}

/// The version of an item the circle has (docs/sync.md, 7.3): writer, counter and mdat, the
/// tuple that a pulled version is compared with. Kept as the columns hold it.
public struct ReplicaStamp: Sendable, Equatable {
    public var writer: [UInt8]
    public var counter: Int64
    /// ms since 2001; nil only in a row stamped by hand without it (schema v6 had no column):
    /// the store then takes the row's own mdat.
    public var mdat: Int64?

    public init(writer: [UInt8], counter: Int64, mdat: Int64? = nil) {
        self.writer = writer
        self.counter = counter
        self.mdat = mdat
    }
}

/// Which rows a search selects by column: everything here is exact equality.
public struct RowFilter: Sendable {
    public var itemClass: ItemClass
    /// Rows in any of these groups (never empty: an empty list means no access).
    public var accessGroups: [String]
    public var protection: Protection?
    public var sync: Int64?
    public var persistentID: [UInt8]?
    public var hashes: [(code: String, hash: [UInt8])] = []
    /// At most this many rows (SQL LIMIT), or all.
    public var limit: Int?
    /// Only rows after this rowid, in rowid order: one page of a long answer (keyset paging,
    /// so each page costs an index range, not a re-scan of the pages before it).
    public var afterRowID: Int64?

    public init(itemClass: ItemClass, accessGroups: [String], protection: Protection? = nil, sync: Int64? = nil,
                persistentID: [UInt8]? = nil, hashes: [(code: String, hash: [UInt8])] = []) {
        self.itemClass = itemClass
        self.accessGroups = accessGroups
        self.protection = protection
        self.sync = sync
        self.persistentID = persistentID
        self.hashes = hashes
    }
}

/// The items table (and the generation counter). Generated SQL only ever interpolates column names and
/// class codes from the fixed schema; every value is bound.
public struct ItemTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    private static let fixedColumns = "rowid, class, persistref, agrp, pdmn, sync, cdat, mdat, data, sync_writer, sync_counter, sync_mdat"
    /// Where the hashed columns start in a row read with `fixedColumns`.
    private static let firstHashColumn: Int32 = 12

    /// Per class, built once: its hashed column codes and the head of its SELECT.
    private struct ClassSQL {
        let codes: [String]
        let select: String
    }

    private static let classSQL: [ItemClass: ClassSQL] = {
        var out: [ItemClass: ClassSQL] = [:]
        for cls in ItemClass.stored {
            let codes = ClassSchema.of(cls)!.columnAttributes.map(\.code)
            out[cls] = ClassSQL(
                codes: codes,
                select: "SELECT \(fixedColumns)\(codes.map { ", h_\($0)" }.joined()) FROM items WHERE class = '\(cls.rawValue)'")
        }
        return out
    }()

    private static func columns(of cls: ItemClass) -> [String] { classSQL[cls]!.codes }

    public func insert(_ row: ItemRow) throws(KeychainError) -> Int64 {
        let codes = Self.columns(of: row.itemClass)
        let names = ["class", "persistref", "agrp", "pdmn", "sync", "cdat", "mdat", "data"] + codes.map { "h_\($0)" }
            + ["sync_writer", "sync_counter", "sync_mdat"]
        let sql = "INSERT INTO items(\(names.joined(separator: ", "))) VALUES (\(names.map { _ in "?" }.joined(separator: ", ")))"
        let stamp = Self.stampValues(row.replicaStamp)
        try db.run(sql, Self.values(of: row, codes: codes) + stamp)
        let rowid = try lastRowID()
        if let hashes = row.attributeHashes { try insertAttributeHashes(hashes, item: rowid) }
        return rowid
    }

    private func insertAttributeHashes(_ hashes: [[UInt8]], item: Int64) throws(KeychainError) {
        for hash in hashes {
            try db.run("INSERT OR IGNORE INTO item_attributes(item, hash) VALUES (?, ?)", [.int(item), .blob(hash)])
        }
    }

    /// Rewrites every column of the row with `row.rowid` but its sync stamp.
    public func replace(_ row: ItemRow) throws(KeychainError) {
        let codes = Self.columns(of: row.itemClass)
        let names = ["class", "persistref", "agrp", "pdmn", "sync", "cdat", "mdat", "data"] + codes.map { "h_\($0)" }
        let sql = "UPDATE items SET \(names.map { "\($0) = ?" }.joined(separator: ", ")) WHERE rowid = ?"
        try db.run(sql, Self.values(of: row, codes: codes) + [.int(row.rowid)])
        if let hashes = row.attributeHashes {
            try db.run("DELETE FROM item_attributes WHERE item = ?", [.int(row.rowid)])
            try insertAttributeHashes(hashes, item: row.rowid)
        }
    }

    private static func values(of row: ItemRow, codes: [String]) -> [SQLValue] {
        var values: [SQLValue] = [
            .text(row.itemClass.rawValue), .blob(row.persistentID), .text(row.accessGroup),
            .text(row.protection?.rawValue ?? ""), .int(row.sync), .double(row.created), .double(row.modified),
            .blob(row.blob),
        ]
        for code in codes { values.append(row.hashes[code].map(SQLValue.blob) ?? .null) }
        return values
    }

    public func delete(rowid: Int64) throws(KeychainError) {
        try db.run("DELETE FROM items WHERE rowid = ?", [.int(rowid)])
    }

    /// Forgets that the circle saw the item: its record is no longer the one the circle knows
    /// (a primary key or sync changed by an update, after the old record's tombstone).
    public func clearStamp(rowid: Int64) throws(KeychainError) {
        try db.run("UPDATE items SET sync_writer = NULL, sync_counter = NULL, sync_mdat = NULL WHERE rowid = ?", [.int(rowid)])
    }

    /// Records that the circle has (or is being sent) this version of the item.
    public func setStamp(_ stamp: ReplicaStamp, rowid: Int64) throws(KeychainError) {
        try db.run("UPDATE items SET sync_writer = ?, sync_counter = ?, sync_mdat = ? WHERE rowid = ?",
                   Self.stampValues(stamp) + [.int(rowid)])
    }

    private static func stampValues(_ stamp: ReplicaStamp?) -> [SQLValue] {
        guard let stamp else { return [.null, .null, .null] }
        return [.blob(stamp.writer), .int(stamp.counter), stamp.mdat.map(SQLValue.int) ?? .null]
    }

    /// The row with this rowid, whatever its class and group (the sync push reads the items
    /// its outbox names).
    public func row(rowid: Int64) throws(KeychainError) -> ItemRow? {
        let found = try db.query("SELECT class FROM items WHERE rowid = ?", [.int(rowid)]) { (s) throws(KeychainError) -> String? in
            try s.step() ? s.text(0) : nil
        }
        guard let found, let cls = ItemClass(rawValue: found), let head = Self.classSQL[cls] else { return nil }
        var row: ItemRow?
        try db.query(head.select + " AND rowid = ?", [.int(rowid)]) { (s) throws(KeychainError) in
            try readRows(s, codes: head.codes) { row = $0; return false }
        }
        return row
    }

    /// The row of class `cls` whose persistent id is `id`, when one of `groups` holds it: one
    /// SELECT on the persistref column's unique index, the groups matched in SQL as every
    /// search matches them (agrp IN, byte for byte). What a key call reads under the store's
    /// lock: no query plan, and nothing opened.
    public func row(persistentID id: [UInt8], of cls: ItemClass, groups: [String]) throws(KeychainError) -> ItemRow? {
        var row: ItemRow?
        try forEach(RowFilter(itemClass: cls, accessGroups: groups, persistentID: id)) { (found) throws(KeychainError) -> Bool in
            row = found
            return false
        }
        return row
    }

    /// Deletes every row of a protection domain; returns how many.
    public func deleteAll(protection: Protection) throws(KeychainError) -> Int {
        try db.run("DELETE FROM items WHERE pdmn = ?", [.text(protection.rawValue)])
        return db.changes
    }

    /// Calls `body` for each row the filter selects, in SQLite's scan order, until it returns false.
    /// `body` must not use the table (collect rows first to change them).
    public func forEach(_ filter: RowFilter, _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        try forEach(Self.selection(filter), body)
    }

    /// A filter turned into SQL conditions, bound values and a statement shape: built once,
    /// outside any lock, so that a caller serialising access to the table holds its lock
    /// only for the lookup itself.
    public struct Selection: Sendable {
        let itemClass: ItemClass
        let isEmpty: Bool
        let clause: (conditions: @Sendable () -> String, values: [SQLValue], shape: UInt64?)
    }

    public static func selection(_ filter: RowFilter) -> Selection {
        Selection(itemClass: filter.itemClass, isEmpty: filter.accessGroups.isEmpty, clause: clause(filter))
    }

    /// `forEach` for a selection built beforehand.
    public func forEach(_ selection: Selection, _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        guard !selection.isEmpty else { return }
        let head = Self.classSQL[selection.itemClass]!
        let codes = head.codes
        let clause = selection.clause
        guard let shape = clause.shape else {
            try db.query(head.select + clause.conditions(), clause.values) { (s) throws(KeychainError) in try readRows(s, codes: codes, body) }
            return
        }
        try db.query(shape: shape, sql: { head.select + clause.conditions() }, clause.values) { (s) throws(KeychainError) in
            try readRows(s, codes: codes, body)
        }
    }

    /// Deletes every row the filter selects in one statement (no row is read into memory);
    /// returns how many.
    public func deleteRows(_ filter: RowFilter) throws(KeychainError) -> Int {
        precondition(filter.limit == nil, "a delete acts on every match")
        let selection = Self.selection(filter)
        guard !selection.isEmpty else { return 0 }
        let clause = selection.clause
        let sql = { "DELETE FROM items WHERE class = '\(filter.itemClass.rawValue)'" + clause.conditions() }
        guard let shape = clause.shape else {
            try db.run(sql(), clause.values)
            return db.changes
        }
        try db.query(shape: shape | 1 << 63, sql: sql, clause.values) { (s) throws(KeychainError) in while try s.step() {} }
        return db.changes
    }

    /// A filter's conditions after the class: the SQL (" AND ..."), its bound values, and the
    /// shape that identifies the SQL for the statement cache (nil for very many groups).
    private static func clause(_ filter: RowFilter) -> (conditions: @Sendable () -> String, values: [SQLValue], shape: UInt64?) {
        let codes = classSQL[filter.itemClass]!.codes
        // Hash conditions in column order, so that one shape always binds in one order.
        var hashes = filter.hashes
        var columns = hashes.map { columnIndex[$0.code]! }
        if !zip(columns, columns.dropFirst()).allSatisfy({ $0 < $1 }) {
            let sorted = zip(columns, hashes).sorted { $0.0 < $1.0 }
            columns = sorted.map(\.0)
            hashes = sorted.map(\.1)
        }
        var values: [SQLValue] = []
        values.reserveCapacity(filter.accessGroups.count + hashes.count + 4)
        values += filter.accessGroups.map(SQLValue.text)
        if let p = filter.protection { values.append(.text(p.rawValue)) }
        if let s = filter.sync { values.append(.int(s)) }
        if let id = filter.persistentID { values.append(.blob(id)) }
        var columnMask: UInt64 = 0
        for ((code, hash), column) in zip(hashes, columns) {
            precondition(codes.contains(code), "\(code) is not a column of \(filter.itemClass.rawValue)")
            columnMask |= 1 << UInt64(column)
            values.append(.blob(hash))
        }
        if let after = filter.afterRowID { values.append(.int(after)) }
        // Bound, not written into the SQL: every limit a caller sends would otherwise be a
        // statement of its own.
        if let limit = filter.limit { values.append(.int(Int64(limit))) }
        let conditions = { @Sendable [hashes] () -> String in
            // A page walks rows in rowid order: unary + keeps agrp and sync from choosing an
            // index whose order is not rowid's (a sort of every match, on every page, made a
            // 200,000-item list quadratic); a hashed column's index or the rowid range serves.
            let page = filter.afterRowID == nil ? "" : "+"
            var sql = " AND \(page)agrp IN (\(filter.accessGroups.map { _ in "?" }.joined(separator: ", ")))"
            if filter.protection != nil { sql += " AND pdmn = ?" }
            if filter.sync != nil { sql += " AND \(page)sync = ?" }
            if filter.persistentID != nil { sql += " AND persistref = ?" }
            for (code, _) in hashes { sql += " AND h_\(code) = ?" }
            // No ORDER BY but for pages: results come in index order, as in securityd, and a
            // sort would cost a temporary B-tree on every lookup.
            if filter.afterRowID != nil { sql += " AND rowid > ? ORDER BY rowid" }
            if filter.limit != nil { sql += " LIMIT ?" }
            return sql
        }
        return (conditions, values, shape(filter, columns: columns, columnMask: columnMask))
    }

    /// The statement-cache key of a filter's SQL, or nil when the filter's SQL cannot be
    /// keyed this way (it is then prepared from its text). The key must be injective: two
    /// filters with different SQL sharing a cached statement would bind one query's values to
    /// the other's text, and every later caller of either would get wrong answers. So every
    /// part of the SQL has a field of its own, and nil wherever a part would not fit or
    /// could not be told apart by the mask (a column named twice). Values are bound, so they
    /// are no part of the key: the limit has one bit, for whether the SQL says LIMIT ?.
    static func shape(_ filter: RowFilter, columns: [Int], columnMask: UInt64) -> UInt64? {
        guard let classIndex = ItemClass.stored.firstIndex(of: filter.itemClass), classIndex < 4,
              filter.accessGroups.count < 256,
              columnMask.nonzeroBitCount == columns.count, columns.allSatisfy({ $0 < 25 }) else { return nil }
        // class: bits 0-1; group count: 2-9; protection, sync, persistref: 10-12; columns:
        // 13-37; limit: 38; page (rowid > ?): 39; bit 63 is left for the statement kind.
        var shape = UInt64(classIndex) | UInt64(filter.accessGroups.count) << 2
        if filter.protection != nil { shape |= 1 << 10 }
        if filter.sync != nil { shape |= 1 << 11 }
        if filter.persistentID != nil { shape |= 1 << 12 }
        shape |= columnMask << 13
        if filter.limit != nil { shape |= 1 << 38 }
        if filter.afterRowID != nil { shape |= 1 << 39 }
        return shape
    }

    // MARK: Secret Service attribute index

    /// The genp rows in `groups` whose svce column is `svce` and that have every one of
    /// `hashes` in the attribute index, in rowid order (lowest first), until `body` returns
    /// false. The rarest hash drives: each is first counted up to 64 rows (one index range
    /// each), then the driver's rows are joined to their items and checked for the others by
    /// primary-key probes, so the cost grows with log n, not n (docs/performance.md).
    public func forEachWithAttributes(_ hashes: [[UInt8]], svce: [UInt8], groups: [String],
                                      _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        precondition(!hashes.isEmpty, "an attribute search names at least one hash")
        guard !groups.isEmpty else { return }
        var ordered = hashes
        if hashes.count > 1 {
            var counts: [Int] = []
            for hash in hashes { counts.append(try attributeRowCount(hash)) }
            let driver = counts.indices.min { counts[$0] < counts[$1] }!
            ordered.swapAt(0, driver)
        }
        let values = [SQLValue.blob(ordered[0]), .blob(svce)] + groups.map(SQLValue.text) + ordered.dropFirst().map(SQLValue.blob)
        let sql = { Self.attributeSearchSQL(hashes: ordered.count, groups: groups.count) }
        let codes = Self.classSQL[.genericPassword]!.codes
        let read = { (s: Statement) throws(KeychainError) in try readRows(s, codes: codes, body) }
        // Its own part of the shape space: bit 62, the hash count (up to 16) and group count
        // (up to 255) in the low bits; anything larger is prepared from its text.
        if ordered.count <= 16 && groups.count < 256 {
            try db.query(shape: 1 << 62 | UInt64(ordered.count) | UInt64(groups.count) << 8, sql: sql, values, read)
        } else {
            try db.query(sql(), values, read)
        }
    }

    /// How many index rows hold `hash`, counted up to 64: enough to pick the rarest.
    private func attributeRowCount(_ hash: [UInt8]) throws(KeychainError) -> Int {
        try db.query("SELECT count(*) FROM (SELECT 1 FROM item_attributes WHERE hash = ? LIMIT 64)", [.blob(hash)]) { (s) throws(KeychainError) in
            _ = try s.step()
            return Int(s.int(0))
        }
    }

    /// The SQL of an attribute search with `hashes` index hashes (the first drives) and
    /// `groups` access groups; values bind as: driver, svce hash, groups, other hashes.
    public static func attributeSearchSQL(hashes: Int, groups: Int) -> String {
        let codes = classSQL[.genericPassword]!.codes
        let columns = fixedColumns.split(separator: ",").map { "i." + $0.filter { $0 != " " } }
            + codes.map { "i.h_\($0)" }
        var sql = "SELECT \(columns.joined(separator: ", ")) FROM item_attributes d JOIN items i ON i.rowid = d.item"
        sql += " WHERE d.hash = ? AND i.class = 'genp' AND i.h_svce = ?"
        sql += " AND i.agrp IN (\(Array(repeating: "?", count: groups).joined(separator: ", ")))"
        for _ in 1..<max(1, hashes) {
            sql += " AND EXISTS (SELECT 1 FROM item_attributes o WHERE o.hash = ? AND o.item = d.item)"
        }
        return sql + " ORDER BY d.item"
    }

    /// How many attribute index rows an item has (tests: the rows follow the item).
    public func attributeRowCount(item: Int64) throws(KeychainError) -> Int {
        try db.query("SELECT count(*) FROM item_attributes WHERE item = ?", [.int(item)]) { (s) throws(KeychainError) in
            _ = try s.step()
            return Int(s.int(0))
        }
    }

    /// Every row of one class and protection class, whatever its group (for backups).
    public func forEachRow(of cls: ItemClass, protection: Protection, _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        let head = Self.classSQL[cls]!
        try db.query(head.select + " AND pdmn = ?", [.text(protection.rawValue)]) { (s) throws(KeychainError) in
            try readRows(s, codes: head.codes, body)
        }
    }

    /// How many rows each protection class holds.
    public func countByProtection() throws(KeychainError) -> [String: Int] {
        try db.query("SELECT pdmn, count(*) FROM items GROUP BY pdmn") { (s) throws(KeychainError) in
            var out: [String: Int] = [:]
            while try s.step() { out[s.text(0)] = Int(s.int(1)) }
            return out
        }
    }

    /// Position of each hashed column in Schema.hashedColumns.
    private static let columnIndex: [String: Int] = Dictionary(
        uniqueKeysWithValues: Schema.hashedColumns.enumerated().map { ($1, $0) })

    private func readRows(_ s: Statement, codes: [String], _ body: (ItemRow) throws(KeychainError) -> Bool) throws(KeychainError) {
        while try s.step() {
            guard let cls = ItemClass(rawValue: s.text(1)) else { continue }
            var hashes: [String: [UInt8]] = [:]
            hashes.reserveCapacity(codes.count)
            for (i, code) in codes.enumerated() where !s.isNull(Self.firstHashColumn + Int32(i)) {
                hashes[code] = s.blob(Self.firstHashColumn + Int32(i))
            }
            var row = ItemRow(
                itemClass: cls, persistentID: s.blob(2), accessGroup: s.text(3),
                protection: Protection(rawValue: s.text(4)), sync: s.int(5),
                created: s.double(6), modified: s.double(7), hashes: hashes, blob: s.blob(8))
            row.rowid = s.int(0)
            if !s.isNull(9) && !s.isNull(10) {
                row.replicaStamp = ReplicaStamp(writer: s.blob(9), counter: s.int(10), mdat: s.isNull(11) ? nil : s.int(11))
            }
            guard try body(row) else { break }
        }
    }

    /// The row holding the same primary key as `row` (class, agrp, sync and the class's
    /// primary-key hashes), other than `row` itself.
    public func primaryKeyHolder(of row: ItemRow) throws(KeychainError) -> ItemRow? {
        let pk = ClassSchema.of(row.itemClass)!.primaryKey.map(\.code)
        let filter = RowFilter(itemClass: row.itemClass, accessGroups: [row.accessGroup], sync: row.sync,
                               hashes: pk.map { ($0, row.hashes[$0] ?? []) })
        var found: ItemRow?
        try forEach(filter) { candidate in
            if candidate.rowid != row.rowid { found = candidate; return false }
            return true
        }
        return found
    }

    public func count() throws(KeychainError) -> Int {
        try db.query("SELECT count(*) FROM items") { (s) throws(KeychainError) in
            _ = try s.step()
            return Int(s.int(0))
        }
    }

    private func lastRowID() throws(KeychainError) -> Int64 {
        try db.query("SELECT last_insert_rowid()") { (s) throws(KeychainError) in
            _ = try s.step()
            return s.int(0)
        }
    }

    // MARK: generation

    /// How many write transactions the database has committed since schema version 3 (0 if
    /// the row was deleted). Compared at start with the record kept outside the database, it
    /// shows committed transactions that went missing.
    public func generation() throws(KeychainError) -> Int64 {
        try db.query("SELECT value FROM generation WHERE id = 1") { (s) throws(KeychainError) in try s.step() ? s.int(0) : 0 }
    }

    /// From now on every transaction adds one to the generation, inside itself: one small
    /// UPDATE per commit, whatever the number of calls or items a group commit holds.
    public func countTransactions() {
        db.beforeEveryCommit = "UPDATE generation SET value = value + 1 WHERE id = 1"
    }

    /// Deletes every item (the erase after too many wrong passcodes).
    public func deleteAllItems() throws(KeychainError) {
        try db.run("DELETE FROM items")
    }
}
