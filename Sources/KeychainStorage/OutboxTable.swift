import KeychainModel

/// A delete of an item the circle has seen, waiting to be pushed (docs/sync.md, 7.3). The
/// record id of a tombstone comes from the item's primary key, which only its sealed blob
/// holds, so the blob moves here as it was, with what opens it: nothing is sealed anew, and
/// a delete made while the item's class is locked waits for the unlock to be pushed.
public struct OutboxTombstone: Sendable, Equatable {
    public var itemClass: ItemClass
    public var protection: Protection
    /// The row identity the blob authenticates (ItemCodec.identity), as it was.
    public var identity: [UInt8]
    public var blob: [UInt8]
    /// When the delete happened, in milliseconds since 2001: the tombstone's mdat.
    public var mdat: Int64

    public init(itemClass: ItemClass, protection: Protection, identity: [UInt8], blob: [UInt8], mdat: Int64) {
        self.itemClass = itemClass
        self.protection = protection
        self.identity = identity
        self.blob = blob
        self.mdat = mdat
    }
}

/// One pending push, in the order the local writes happened.
public struct OutboxEntry: Sendable, Equatable {
    public enum Change: Sendable, Equatable {
        /// The item's current version (read from the items table when pushed).
        case version(item: Int64)
        case tombstone(OutboxTombstone)
    }

    public var id: Int64
    public var change: Change
    /// Given when the entry is first pushed and kept for every retry; nil until then.
    public var counter: Int64?
    /// A version's mdat, fixed with its first counter so that every retry carries the same
    /// tuple (a tombstone's is its own, in `change`); nil until then.
    public var mdat: Int64?
}

/// The table sync_outbox: what this device has to push. Rows are written in the transaction
/// of the local change they stand for; an item's entry goes with the item (the foreign key
/// cascades), so a deleted item's pending version never outlives it.
public struct OutboxTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// Queues the current version of item `rowid`: one entry per item, whatever the number
    /// of writes before the push. An entry already given a counter gets a new one at the next
    /// push: its version was replaced, and a retry must never carry other contents under the
    /// counter of a push that may have committed.
    public func queueVersion(item rowid: Int64) throws(KeychainError) {
        try db.run("INSERT INTO sync_outbox(item) VALUES (?) ON CONFLICT(item) DO UPDATE SET counter = NULL, mdat = NULL", [.int(rowid)])
    }

    /// Drops the pending version of item `rowid` (the item no longer syncs).
    public func dequeueVersion(item rowid: Int64) throws(KeychainError) {
        try db.run("DELETE FROM sync_outbox WHERE item = ?", [.int(rowid)])
    }

    public func queueTombstone(_ tombstone: OutboxTombstone) throws(KeychainError) {
        try db.run("INSERT INTO sync_outbox(class, pdmn, identity, blob, mdat) VALUES (?, ?, ?, ?, ?)", [
            .text(tombstone.itemClass.rawValue), .text(tombstone.protection.rawValue), .blob(tombstone.identity),
            .blob(tombstone.blob), .int(tombstone.mdat),
        ])
    }

    /// Every entry, oldest first. An entry whose columns were edited into something no
    /// keychaind writes is errSecDecode.
    public func entries() throws(KeychainError) -> [OutboxEntry] {
        try entries(where: "1", [])
    }

    private func entries(where condition: String, _ values: [SQLValue]) throws(KeychainError) -> [OutboxEntry] {
        try db.query("SELECT id, item, counter, class, pdmn, identity, blob, mdat FROM sync_outbox WHERE \(condition) ORDER BY id", values) { (s) throws(KeychainError) in
            var out: [OutboxEntry] = []
            while try s.step() {
                let counter = s.isNull(2) ? nil : s.int(2)
                if !s.isNull(1) {
                    out.append(OutboxEntry(id: s.int(0), change: .version(item: s.int(1)), counter: counter,
                                               mdat: s.isNull(7) ? nil : s.int(7)))
                    continue
                }
                guard let cls = ItemClass(rawValue: s.text(3)), ItemClass.stored.contains(cls),
                      let pdmn = Protection(rawValue: s.text(4)) else {
                    throw KeychainError(.decode, "a sync outbox entry names an unknown class or protection class: the row was altered")
                }
                let tombstone = OutboxTombstone(itemClass: cls, protection: pdmn, identity: s.blob(5), blob: s.blob(6), mdat: s.int(7))
                out.append(OutboxEntry(id: s.int(0), change: .tombstone(tombstone), counter: counter, mdat: tombstone.mdat))
            }
            return out
        }
    }

    /// The pending version of item `rowid`, if any.
    public func entry(item rowid: Int64) throws(KeychainError) -> OutboxEntry? {
        try entries(where: "item = ?", [.int(rowid)]).first
    }

    /// The pending tombstones of one class (not the versions: a first push may queue many).
    public func tombstones(of itemClass: ItemClass) throws(KeychainError) -> [OutboxEntry] {
        try entries(where: "item IS NULL AND class = ?", [.text(itemClass.rawValue)])
    }

    /// Gives an entry the counter (and, for a version, the mdat) it keeps for every retry.
    public func setCounter(_ counter: Int64, mdat: Int64, entry id: Int64) throws(KeychainError) {
        try db.run("UPDATE sync_outbox SET counter = ?, mdat = ? WHERE id = ?", [.int(counter), .int(mdat), .int(id)])
    }

    /// Takes an entry's counter back, keeping its mdat: it waits for its class key while later
    /// writes go out with higher counters, and a writer's counters must rise with seq.
    public func clearCounter(entry id: Int64) throws(KeychainError) {
        try db.run("UPDATE sync_outbox SET counter = NULL WHERE id = ?", [.int(id)])
    }

    /// Removes an entry whatever its state (it lost to a pulled version, or can never be pushed).
    public func delete(entry id: Int64) throws(KeychainError) {
        try db.run("DELETE FROM sync_outbox WHERE id = ?", [.int(id)])
    }

    /// Removes an entry that was pushed with `counter`, unless a local write re-queued it
    /// since (its counter was then cleared, or given anew). Returns whether it went.
    @discardableResult
    public func deletePushed(entry id: Int64, counter: Int64) throws(KeychainError) -> Bool {
        try db.run("DELETE FROM sync_outbox WHERE id = ? AND counter = ?", [.int(id), .int(counter)])
        return db.changes == 1
    }

    /// Drops every entry (the keychain's erase: its items and class keys are gone).
    public func deleteAll() throws(KeychainError) {
        try db.run("DELETE FROM sync_outbox")
    }
}
