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
    /// Rows older than what this device holds (among the superseded and the replays): the
    /// version held here was queued to be pushed again, item or delete.
    public var repushed = 0

    public init(applied: Int = 0, superseded: Int = 0, rejected: Int = 0, deferred: Int = 0, repushed: Int = 0) {
        self.applied = applied
        self.superseded = superseded
        self.rejected = rejected
        self.deferred = deferred
        self.repushed = repushed
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
                    try application.answerReplay(row, contents)
                    continue
                }
                let outcome = try application.apply(row, contents)
                if outcome == .deferred { try SyncInboxTable(database).hold(row) }
                report.count(outcome)
            }
            report.repushed = application.repushed
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
            report.repushed = application.repushed
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
    /// The deletes kept after their push or pull (LocalTombstones), by tag; read on first need.
    private var deletes: [[UInt8]: SyncVersion]?
    /// Rows older than what this device holds, whose newer version was queued again.
    private(set) var repushed = 0
    private let now: Int64

    init(replica: ItemReplica, circleKey: SyncCircleKey, writer: SyncDeviceID) {
        self.replica = replica
        self.circleKey = circleKey
        self.writer = writer
        now = ItemReplica.milliseconds(replica.now())
    }

    /// What this device holds of a record: its item (if any), the item's pending change, a
    /// pending tombstone of the record, and, with no item, a delete kept after it went.
    private struct Local {
        var item: ItemRow?
        var pending: OutboxEntry?
        var tombstone: OutboxEntry?
        var deleted: SyncVersion?
    }

    /// Which of the local side gives the version held here.
    private enum Held {
        /// An unpushed change: it goes out with the next push whatever the store holds.
        case pending
        /// The item's stamp: the version the circle had from or through this device.
        case stamp
        /// A delete kept after it went (LocalTombstones).
        case deleted(SyncVersion)
    }

    private enum Resolution {
        case incoming
        case local(Held)
        case same
    }

    /// The item of a pulled item row, as `repush` needs it to queue a delete of its record.
    private struct Incoming {
        let cls: ItemClass
        let pdmn: Protection
        let attributes: AttributeDictionary
        let key: SecureKey
    }

    mutating func apply(_ row: SyncRecordRow, _ contents: SyncRecordContents) throws(KeychainError) -> SyncRowOutcome {
        switch contents {
        case .item(let cls, let pdmn, let attributes):
            guard let (attributes, data) = Self.storable(cls, pdmn, attributes) else { return .rejected }
            guard let key = replica.classKey(pdmn) else { return .deferred }
            guard let held = try local(cls, row.recordID, holder: holder(cls, attributes)) else { return .deferred }
            switch try resolve(row.version, held) {
            case .incoming: break
            case .same: return .superseded
            case .local(let source):
                try repush(source, held, row, Incoming(cls: cls, pdmn: pdmn, attributes: attributes, key: key))
                return .superseded
            }
            if let tombstone = held.tombstone { try drop(tombstone, cls, row.recordID) }
            if let pending = held.pending { try replica.outbox.delete(entry: pending.id) }
            if held.deleted != nil { try forgetDelete(row.recordID) }
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
            switch try resolve(row.version, held) {
            case .incoming: break
            case .same: return .superseded
            case .local(let source):
                try repush(source, held, row, nil)
                return .superseded
            }
            // Only a device that held the item keeps its delete: one that never did has
            // nothing a restore could bring back here, and keeps no trace of it.
            if held.item != nil || held.tombstone != nil || held.deleted != nil { try keepDelete(row.recordID, row.version) }
            if let tombstone = held.tombstone { try drop(tombstone, cls, row.recordID) }
            if let item = held.item {
                try replica.delete(rowid: item.rowid)  // its pending change goes with it; no tombstone is queued
                items[cls]??[row.recordID] = nil
            }
            return .applied
        }
    }

    /// A row that is a replay (an old counter of its writer after the cursor) is never
    /// applied; but if it is older than what this device holds, the store serves an old
    /// version again (its operator wrote it back), and the newer one goes back to it.
    mutating func answerReplay(_ row: SyncRecordRow, _ contents: SyncRecordContents) throws(KeychainError) {
        switch contents {
        case .item(let cls, let pdmn, let attributes):
            guard let (attributes, _) = Self.storable(cls, pdmn, attributes), let key = replica.classKey(pdmn),
                  let held = try local(cls, row.recordID, holder: holder(cls, attributes)),
                  case .local(let source) = try resolve(row.version, held) else { return }
            try repush(source, held, row, Incoming(cls: cls, pdmn: pdmn, attributes: attributes, key: key))
        case .tombstone(let cls):
            guard let holder = try itemRow(cls, row.recordID), let held = try local(cls, row.recordID, holder: holder),
                  case .local(let source) = try resolve(row.version, held) else { return }
            try repush(source, held, row, nil)
        }
    }

    /// Which version wins, the pulled one or the one this device holds (docs/sync.md, 5).
    /// The local version is an unpushed change if there is one (numbered or not yet), else
    /// the stamp, else a delete kept here. The same version coming back means the store holds
    /// this device's change: its entry has been pushed.
    private func resolve(_ incoming: SyncVersion, _ local: Local) throws(KeychainError) -> Resolution {
        var pending: OutboxEntry?
        var version: SyncVersion?
        var held = Held.pending
        // A change not numbered yet will be, above every number given so far.
        if let change = local.pending, let item = local.item {
            pending = change
            version = SyncVersion(mdat: LocalVersion.pendingMdat(change, item), writer: writer, counter: change.counter ?? .max)
        } else if let tombstone = local.tombstone, case .tombstone(let deleted) = tombstone.change {
            pending = tombstone
            version = SyncVersion(mdat: deleted.mdat, writer: writer, counter: tombstone.counter ?? .max)
        } else if let item = local.item, let stamp = item.replicaStamp, let stampWriter = try? SyncDeviceID(stamp.writer) {
            version = SyncVersion(mdat: LocalVersion.stampMdat(stamp, item), writer: stampWriter, counter: stamp.counter)
            held = .stamp
        } else if local.item == nil, let deleted = local.deleted {
            version = deleted
            held = .deleted(deleted)
        }
        switch SyncConflict.resolve(local: version, incoming: incoming) {
        case .takeIncoming:
            return .incoming
        case .identical:
            if let pending { try replica.outbox.deletePushed(entry: pending.id, counter: incoming.counter) }
            return .same
        case .keepLocal:
            return .local(held)
        }
    }

    /// The store serves a version older than the one this device holds (a restored backup,
    /// a row its operator wrote back): the held one is queued to be pushed again, renumbered
    /// above the old one, so that a device that never saw it (a new member's first pull)
    /// converges to it instead of to the old one. An item goes as its current version; a
    /// delete kept here as a tombstone of the record the old row names (its attributes sealed
    /// with no secret, for the record id alone). A pending change needs nothing: it goes out
    /// anyway. An old delete against a kept delete needs nothing either.
    private mutating func repush(_ source: Held, _ local: Local, _ row: SyncRecordRow, _ incoming: Incoming?) throws(KeychainError) {
        switch source {
        case .pending:
            return
        case .stamp:
            guard let item = local.item else { return }
            try replica.queueVersion(item: item.rowid)
        case .deleted(let deleted):
            guard let incoming else { return }
            let sealed = replica.seal(incoming.cls, attributes: incoming.attributes, data: .empty,
                                      persistentID: replica.newPersistentID(), classKey: incoming.key)
            let mdat = SyncVersion.stampedMdat(now: now, previous: max(deleted.mdat, row.version.mdat))
            try replica.outbox.queueTombstone(OutboxTombstone(itemClass: incoming.cls, protection: incoming.pdmn,
                                                              identity: replica.blobIdentity(of: sealed), blob: sealed.blob, mdat: mdat))
            tombstones[incoming.cls] = nil  // read again with the new entry
        }
        repushed += 1
    }

    private mutating func keptDeletes() throws(KeychainError) -> [[UInt8]: SyncVersion] {
        if let deletes { return deletes }
        let read = try LocalTombstones(replica).kept(circleKey: circleKey)
        deletes = read
        return read
    }

    private mutating func keepDelete(_ recordID: [UInt8], _ version: SyncVersion) throws(KeychainError) {
        try LocalTombstones(replica).keep(recordID: recordID, version: version, circleKey: circleKey, now: now)
        deletes = nil
    }

    private mutating func forgetDelete(_ recordID: [UInt8]) throws(KeychainError) {
        try LocalTombstones(replica).forget(recordID: recordID, circleKey: circleKey)
        deletes = nil
    }

    /// The local side of a record whose item is `holder` (nil: none here), or nil when a
    /// pending tombstone of its class cannot be opened yet.
    private mutating func local(_ cls: ItemClass, _ recordID: [UInt8], holder: ItemRow?) throws(KeychainError) -> Local? {
        guard let pendingTombstones = try pendingTombstones(cls) else { return nil }
        var local = Local(item: holder, tombstone: pendingTombstones[recordID])
        if let holder {
            local.pending = try replica.outbox.entry(item: holder.rowid)
        } else {
            local.deleted = try keptDeletes()[circleKey.tombstoneTag(recordID: recordID)]
        }
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
