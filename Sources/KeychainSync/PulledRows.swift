import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// What one batch of pulled rows did locally.
public struct SyncApplyReport: Sendable, Equatable {
    /// Rows that changed an item (added, updated or deleted it) or confirmed its absence.
    public var applied = 0
    /// Rows older than, or the same as, what this device holds: dropped, not an error.
    public var superseded = 0
    /// Rows that did not open under the circle key, replayed rows, and rows whose item this
    /// keychain cannot store: never applied.
    public var rejected = 0
    /// Rows waiting in the inbox for their class key (ak while locked).
    public var deferred = 0

    public init(applied: Int = 0, superseded: Int = 0, rejected: Int = 0, deferred: Int = 0) {
        self.applied = applied
        self.superseded = superseded
        self.rejected = rejected
        self.deferred = deferred
    }

    mutating func count(_ outcome: SyncRowOutcome) {
        switch outcome {
        case .applied: applied += 1
        case .superseded: superseded += 1
        case .rejected: rejected += 1
        case .deferred: deferred += 1
        }
    }
}

enum SyncRowOutcome {
    case applied, superseded, rejected, deferred
}

/// The pull's local half (docs/sync.md, 5 and 6): rows the store served become local items,
/// their conflicts settled by the version tuple, replays refused, and rows of a locked class
/// kept for the unlock. Nothing here touches the network, and nothing applied here is queued
/// to be pushed back.
public struct PulledRows {
    let replica: ItemReplica

    public init(_ replica: ItemReplica) { self.replica = replica }

    private var database: SQLiteDatabase { replica.database }

    /// Applies `rows` (in seq order) and stores `cursor` in the same transaction, so a batch
    /// is applied with its cursor or not at all. A row that does not open, or is a replay
    /// (`mode` afterCursor), is counted and skipped, never thrown. `writer` is this device's
    /// id: an unpushed local change is its version.
    public func apply(_ rows: [SyncRecordRow], circleKey: SyncCircleKey, writer: SyncDeviceID, mode: SyncPullMode,
                          cursor: Int64) throws(KeychainError) -> SyncApplyReport {
        // A pull that found nothing commits nothing (each transaction moves the generation).
        if rows.isEmpty, try SyncCircleTable(database).row()?.cursor == cursor { return SyncApplyReport() }
        return try database.transaction { () throws(KeychainError) -> SyncApplyReport in
            try LocalCircle(replica).check(circleKey)
            let seen = SyncWritersSeenTable(database)
            var ledger = try seen.ledger()
            var application = PulledRowApplication(replica: replica, circleKey: circleKey, writer: writer)
            var report = SyncApplyReport()
            for row in rows.sorted(by: { $0.seq < $1.seq }) {
                guard let contents = Self.open(row, circleKey: circleKey) else {
                    report.rejected += 1
                    continue
                }
                // A replay is told by its header alone, so it is caught even for a row that
                // must wait for its class key.
                guard ledger.admit(row.version, local: nil, mode: mode) != .replay else {
                    report.rejected += 1
                    continue
                }
                let outcome = try application.apply(row, contents)
                if outcome == .deferred { try SyncInboxTable(database).hold(row) }
                report.count(outcome)
            }
            try seen.save(ledger)
            try SyncCircleTable(database).setCursor(cursor)
            return report
        }
    }

    /// Applies the inbox's rows whose class key is now loaded (after an unlock); the others
    /// stay, counted as deferred. Their replay check was made when they were pulled.
    public func applyInbox(circleKey: SyncCircleKey, writer: SyncDeviceID) throws(KeychainError) -> SyncApplyReport {
        let inbox = SyncInboxTable(database)
        // Still locked (the usual case at each housekeeping pass): nothing to commit.
        let waiting = try inbox.rows()
        let stillLocked = waiting.allSatisfy { row in
            guard case .item(_, let pdmn, _)? = Self.open(row, circleKey: circleKey) else { return false }
            return replica.classKey(pdmn) == nil
        }
        if stillLocked { return SyncApplyReport(deferred: waiting.count) }
        return try database.transaction { () throws(KeychainError) -> SyncApplyReport in
            try LocalCircle(replica).check(circleKey)
            var application = PulledRowApplication(replica: replica, circleKey: circleKey, writer: writer)
            var report = SyncApplyReport()
            for row in try inbox.rows() {
                let outcome: SyncRowOutcome
                if let contents = Self.open(row, circleKey: circleKey) {
                    outcome = try application.apply(row, contents)
                } else {
                    outcome = .rejected  // of a passed epoch, or altered where it waited
                }
                if outcome != .deferred { try inbox.delete(recordID: row.recordID) }
                report.count(outcome)
            }
            return report
        }
    }

    /// Rows waiting in the inbox for their class key, for status.
    public func inboxCount() throws(KeychainError) -> Int { try SyncInboxTable(database).count() }

    /// The row opened, or nil for anything but a record sealed by a member for exactly this
    /// row: its circle, epoch, record id and version.
    static func open(_ row: SyncRecordRow, circleKey: SyncCircleKey) -> SyncRecordContents? {
        let header = SyncRecordHeader(circleID: circleKey.circleID, recordID: row.recordID, epoch: row.epoch,
                                      version: row.version, tombstone: row.tombstone)
        return try? SyncRecordSealer.open(header, body: row.body, circleKey: circleKey)
    }
}

/// One call's application of pulled rows, in its transaction. A tombstone names its item by
/// record id only, which this device does not store (docs/sync.md, 2.2): the record ids of the
/// local synced items, and of pending tombstones, are computed once per class when a row
/// first needs them, and kept up to date as rows add and delete items.
private struct PulledRowApplication {
    let replica: ItemReplica
    let circleKey: SyncCircleKey
    let writer: SyncDeviceID
    /// Per class: record id → rowid of the synced items; nil when some could not be opened
    /// (their class key is not loaded), so a row's item may be among them.
    private var items: [ItemClass: [[UInt8]: Int64]?] = [:]
    /// Per class: record id → pending tombstone entry; nil when some could not be opened.
    private var tombstones: [ItemClass: [[UInt8]: OutboxEntry]?] = [:]

    init(replica: ItemReplica, circleKey: SyncCircleKey, writer: SyncDeviceID) {
        self.replica = replica
        self.circleKey = circleKey
        self.writer = writer
    }

    /// What this device holds of a record: its item (if any), the item's pending change, and
    /// a pending tombstone of the record.
    private struct Local {
        var item: ItemRow?
        var pending: OutboxEntry?
        var tombstone: OutboxEntry?
    }

    mutating func apply(_ row: SyncRecordRow, _ contents: SyncRecordContents) throws(KeychainError) -> SyncRowOutcome {
        switch contents {
        case .item(let cls, let pdmn, let attributes):
            guard let (attributes, data) = Self.storable(cls, pdmn, attributes) else { return .rejected }
            guard let key = replica.classKey(pdmn) else { return .deferred }
            guard let held = try local(cls, row.recordID, holder: holder(cls, attributes)) else { return .deferred }
            guard try incomingWins(row.version, held) else { return .superseded }
            if let tombstone = held.tombstone { try drop(tombstone, cls, row.recordID) }
            if let pending = held.pending { try replica.outbox.delete(entry: pending.id) }
            let stamp = ReplicaStamp(writer: row.version.writer.bytes, counter: row.version.counter, mdat: row.version.mdat)
            if let item = held.item {
                var replaced = replica.seal(cls, attributes: attributes, data: data, persistentID: item.persistentID,
                                                classKey: key, rowid: item.rowid)
                replaced.attributeHashes = replaced.attributeHashes ?? []  // none now: clear the old ones
                try replica.replace(replaced)
                try replica.stamp(stamp, rowid: item.rowid)
            } else {
                var added = replica.seal(cls, attributes: attributes, data: data,
                                        persistentID: replica.newPersistentID(), classKey: key)
                added.replicaStamp = stamp
                do throws(KeychainError) {
                    added.rowid = try replica.insert(added)
                } catch where error.status == .duplicateItem {
                    return .rejected  // held by a row this keychain hashed otherwise (before schema v4)
                }
                items[cls]??[row.recordID] = added.rowid
            }
            return .applied
        case .tombstone(let cls):
            guard let holder = try itemRow(cls, row.recordID), let held = try local(cls, row.recordID, holder: holder) else {
                return .deferred
            }
            guard try incomingWins(row.version, held) else { return .superseded }
            if let tombstone = held.tombstone { try drop(tombstone, cls, row.recordID) }
            if let item = held.item {
                try replica.delete(rowid: item.rowid)  // its pending change goes with it; no tombstone is queued
                items[cls]??[row.recordID] = nil
            }
            return .applied
        }
    }

    /// Whether the pulled version beats what this device holds (docs/sync.md, 5). The local
    /// version is an unpushed change if there is one (numbered or not yet), else the stamp.
    /// The same version coming back means the store holds this device's change: its entry
    /// has been pushed.
    private func incomingWins(_ incoming: SyncVersion, _ local: Local) throws(KeychainError) -> Bool {
        var pending: OutboxEntry?
        var version: SyncVersion?
        // A change not numbered yet will be, above every number given so far.
        if let change = local.pending, let item = local.item {
            pending = change
            version = SyncVersion(mdat: LocalVersion.pendingMdat(change, item), writer: writer, counter: change.counter ?? .max)
        } else if let tombstone = local.tombstone, case .tombstone(let deleted) = tombstone.change {
            pending = tombstone
            version = SyncVersion(mdat: deleted.mdat, writer: writer, counter: tombstone.counter ?? .max)
        } else if let item = local.item, let stamp = item.replicaStamp, let stampWriter = try? SyncDeviceID(stamp.writer) {
            version = SyncVersion(mdat: LocalVersion.stampMdat(stamp, item), writer: stampWriter, counter: stamp.counter)
        }
        switch SyncConflict.resolve(local: version, incoming: incoming) {
        case .takeIncoming:
            return true
        case .identical:
            if let pending { try replica.outbox.deletePushed(entry: pending.id, counter: incoming.counter) }
            return false
        case .keepLocal:
            return false
        }
    }

    /// The local side of a record whose item is `holder` (nil: none here), or nil when a
    /// pending tombstone of its class cannot be opened yet.
    private mutating func local(_ cls: ItemClass, _ recordID: [UInt8], holder: ItemRow?) throws(KeychainError) -> Local? {
        guard let pendingTombstones = try pendingTombstones(cls) else { return nil }
        var local = Local(item: holder, tombstone: pendingTombstones[recordID])
        if let holder { local.pending = try replica.outbox.entry(item: holder.rowid) }
        return local
    }

    private mutating func drop(_ tombstone: OutboxEntry, _ cls: ItemClass, _ recordID: [UInt8]) throws(KeychainError) {
        try replica.outbox.delete(entry: tombstone.id)
        tombstones[cls]??[recordID] = nil
    }

    /// The synced item holding the record of `attributes`, found by this device's lookup
    /// hashes of its primary key (no item needs opening).
    private func holder(_ cls: ItemClass, _ attributes: AttributeDictionary) throws(KeychainError) -> ItemRow? {
        let schema = ClassSchema.of(cls)!
        let hashes = replica.lookupHashes(of: cls, attributes)
        let filter = RowFilter(itemClass: cls, accessGroups: [attributes["agrp"]!.stringValue!], sync: 1,
                               hashes: schema.primaryKey.map { ($0.code, hashes[$0.code] ?? []) })
        var found: ItemRow?
        try replica.forEachRow(matching: filter) { found = $0; return false }
        return found
    }

    /// The synced item whose record id is `recordID`: `.some(nil)` when there is none, nil
    /// when an item of a locked class might be it.
    private mutating func itemRow(_ cls: ItemClass, _ recordID: [UInt8]) throws(KeychainError) -> ItemRow?? {
        if items[cls] == nil { items[cls] = try recordIDsOfItems(cls) }
        guard let byRecord = items[cls]! else { return nil }
        guard let rowid = byRecord[recordID] else { return .some(nil) }
        return .some(try replica.row(rowid: rowid))
    }

    private func recordIDsOfItems(_ cls: ItemClass) throws(KeychainError) -> [[UInt8]: Int64]? {
        var out: [[UInt8]: Int64] = [:]
        var complete = true
        for pdmn in Protection.allCases where !pdmn.isThisDeviceOnly {
            let key = replica.classKey(pdmn)
            var rows: [ItemRow] = []
            try replica.forEachRow(of: cls, protection: pdmn) { row in
                if row.sync == 1 { rows.append(row) }
                return key != nil || rows.isEmpty  // one synced row of a locked class is enough to know
            }
            guard let key else {
                if !rows.isEmpty { complete = false }
                continue
            }
            for row in rows {
                // An altered row opens for nobody and is no record's item.
                guard let item = try? replica.open(row, classKey: key) else { continue }
                out[try circleKey.recordID(of: cls, attributes: item.attributes)] = row.rowid
            }
        }
        return complete ? out : nil
    }

    /// The pending tombstones of `cls` by record id, or nil while one of them cannot be opened.
    private mutating func pendingTombstones(_ cls: ItemClass) throws(KeychainError) -> [[UInt8]: OutboxEntry]? {
        if let known = tombstones[cls] { return known }
        var out: [[UInt8]: OutboxEntry]? = [:]
        for entry in try replica.outbox.tombstones(of: cls) {
            guard case .tombstone(let tombstone) = entry.change else { continue }
            guard let key = replica.classKey(tombstone.protection) else {
                out = nil
                break
            }
            guard let attributes = try? LocalVersion.attributes(of: tombstone, classKey: key) else { continue }
            out?[try circleKey.recordID(of: cls, attributes: attributes)] = entry
        }
        tombstones[cls] = out
        return out
    }

    /// A pulled item's attributes as this keychain stores them, and its secret; nil for what
    /// no keychaind writes (a bug or a rogue member): every attribute of the class in its
    /// stored form, the common ones present and agreeing with the record's class and key class.
    static func storable(_ cls: ItemClass, _ pdmn: Protection,
                         _ received: AttributeDictionary) -> (AttributeDictionary, SecretBytes)? {
        guard let schema = ClassSchema.of(cls) else { return nil }
        var attributes = received
        var data = SecretBytes.empty
        switch attributes.removeValue(forKey: "v_Data") {
        case nil: break
        case .data(let d)?: data = d
        default: return nil
        }
        for (code, value) in attributes {
            guard let spec = schema.spec(code), let stored = try? spec.coerce(value), stored == value else { return nil }
        }
        guard case .string(let agrp)? = attributes["agrp"], !agrp.isEmpty, attributes["pdmn"] == .string(pdmn.rawValue),
              attributes["sync"] == .int(1), case .date? = attributes["cdat"], case .date? = attributes["mdat"] else { return nil }
        for spec in schema.primaryKey where attributes[spec.code] == nil {
            attributes[spec.code] = spec.defaultValue
        }
        return (attributes, data)
    }
}
