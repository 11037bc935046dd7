import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// One outbox entry sealed as the row the store will upsert.
public struct SyncOutgoingRecord: Sendable, Equatable {
    public let outboxID: Int64
    public let row: SyncRecordRow

    public init(outboxID: Int64, row: SyncRecordRow) {
        self.outboxID = outboxID
        self.row = row
    }
}

/// The push's local half (docs/sync.md, 7.1 and 7.3): outbox entries become sealed records,
/// and go only once the store has committed them. Nothing here touches the network.
public struct OutboxPush {
    let replica: ItemReplica

    public init(_ replica: ItemReplica) { self.replica = replica }

    private var outbox: OutboxTable { replica.outbox }

    /// Up to `limit` pending changes sealed under `circleKey` as rows of its epoch, in counter
    /// order. An entry pushed for the first time is numbered now and its item stamped with the
    /// version, in one local transaction; an entry given its number before keeps it and its
    /// mdat, so a retry after a lost acknowledgement carries the same tuple. Entries whose
    /// class key is not loaded stay queued and are left out. Nothing is removed from the
    /// outbox: `pushed` does that once the push committed.
    public func outgoing(circleKey: SyncCircleKey, writer: SyncDeviceID, limit: Int) throws(KeychainError) -> [SyncOutgoingRecord] {
        guard limit > 0 else { return [] }
        // Every transaction moves the generation, which the Secret Service bridge reports as
        // a change: a pass with nothing to send, or only entries waiting for a key, commits none.
        var anything = false
        for entry in try outbox.entries() where try mayGoOrChange(entry) {
            anything = true
            break
        }
        guard anything else { return [] }
        return try replica.database.transaction { () throws(KeychainError) -> [SyncOutgoingRecord] in
            try LocalCircle(replica).check(circleKey)
            var out: [SyncOutgoingRecord] = []
            for entry in try Self.pushOrder(outbox.entries()) {
                guard out.count < limit else { break }
                if let record = try outgoingRecord(entry, circleKey: circleKey, writer: writer) {
                    out.append(SyncOutgoingRecord(outboxID: entry.id, row: record))
                }
            }
            return out
        }
    }

    /// Removes the entries of `records`, which the store has committed. An entry changed
    /// locally since it was sealed (re-queued, so its counter was cleared or given anew) stays
    /// for the next push.
    public func pushed(_ records: [SyncOutgoingRecord]) throws(KeychainError) {
        guard !records.isEmpty else { return }
        try replica.database.transaction { () throws(KeychainError) in
            for record in records {
                try outbox.deletePushed(entry: record.outboxID, counter: record.row.version.counter)
            }
        }
    }

    /// Pending pushes, for status.
    public func count() throws(KeychainError) -> Int {
        try replica.database.query("SELECT count(*) FROM sync_outbox") { (s) throws(KeychainError) in
            try s.step() ? Int(s.int(0)) : 0
        }
    }

    /// Entries already numbered first, by number (a retry must not follow higher counters),
    /// then the rest in the order of the local writes: the writer's counters then rise with
    /// the store's seq, which the replay check of every other device relies on.
    static func pushOrder(_ entries: [OutboxEntry]) -> [OutboxEntry] {
        let numbered = entries.filter { $0.counter != nil }.sorted { $0.counter! < $1.counter! }
        return numbered + entries.filter { $0.counter == nil }
    }

    /// The row for one entry, or nil when it cannot go now (its class is locked) or ever (its
    /// item no longer syncs or does not open: the entry is dropped).
    private func outgoingRecord(_ entry: OutboxEntry, circleKey: SyncCircleKey,
                                writer: SyncDeviceID) throws(KeychainError) -> SyncRecordRow? {
        switch entry.change {
        case .version(let rowid):
            guard let row = try replica.row(rowid: rowid), row.sync == 1, let pdmn = row.protection, !pdmn.isThisDeviceOnly else {
                try outbox.delete(entry: entry.id)
                return nil
            }
            guard let key = replica.classKey(pdmn) else { return try waitForKey(entry) }
            let item: (attributes: AttributeDictionary, data: SecretBytes)
            do throws(KeychainError) {
                item = try replica.open(row, classKey: key)
            } catch where error.status == .decode {
                try outbox.delete(entry: entry.id)  // altered: it opens for nobody
                return nil
            }
            let version = try numbered(entry, writer: writer, mdat: LocalVersion.pendingMdat(entry, row))
            if entry.counter == nil {
                try replica.stamp(ReplicaStamp(writer: writer.bytes, counter: version.counter, mdat: version.mdat), rowid: rowid)
            }
            var attributes = item.attributes
            attributes["v_Data"] = .data(item.data)
            let (header, body) = try SyncRecordSealer.seal(row.itemClass, pdmn, attributes, version: version, circleKey: circleKey)
            return SyncRecordRow(recordID: header.recordID, epoch: header.epoch, version: version, tombstone: false, body: body)
        case .tombstone(let tombstone):
            guard let key = replica.classKey(tombstone.protection) else { return try waitForKey(entry) }
            let recordID: [UInt8]
            do throws(KeychainError) {
                recordID = try circleKey.recordID(of: tombstone.itemClass, attributes: LocalVersion.attributes(of: tombstone, classKey: key))
            } catch where error.status == .decode {
                try outbox.delete(entry: entry.id)
                return nil
            }
            let version = try numbered(entry, writer: writer, mdat: tombstone.mdat)
            // Kept once the outbox entry is gone, so an older version the store serves again
            // does not undo the delete here.
            try LocalTombstones(replica).keep(recordID: recordID, version: version, circleKey: circleKey,
                                              now: ItemReplica.milliseconds(replica.now()))
            let (header, body) = SyncRecordSealer.sealTombstone(tombstone.itemClass, recordID: recordID, version: version, circleKey: circleKey)
            return SyncRecordRow(recordID: header.recordID, epoch: header.epoch, version: version, tombstone: true, body: body)
        }
    }

    /// Whether `entry` would be sent or changed now: false only for one that waits for its
    /// class key without a counter to give back.
    private func mayGoOrChange(_ entry: OutboxEntry) throws(KeychainError) -> Bool {
        guard entry.counter == nil else { return true }
        switch entry.change {
        case .version(let rowid):
            guard let pdmn = try replica.row(rowid: rowid)?.protection else { return true }
            return replica.classKey(pdmn) != nil || pdmn.isThisDeviceOnly
        case .tombstone(let tombstone):
            return replica.classKey(tombstone.protection) != nil
        }
    }

    /// The entry's version: the one it was given, or a new number now, kept in the outbox.
    private func numbered(_ entry: OutboxEntry, writer: SyncDeviceID, mdat: Int64) throws(KeychainError) -> SyncVersion {
        if let counter = entry.counter { return SyncVersion(mdat: mdat, writer: writer, counter: counter) }
        let counter = try SyncCircleTable(replica.database).nextCounter()
        try outbox.setCounter(counter, mdat: mdat, entry: entry.id)
        return SyncVersion(mdat: mdat, writer: writer, counter: counter)
    }

    /// A locked entry gives its number back: later entries go out with higher ones meanwhile,
    /// and this one must not follow them under a lower number. Its mdat stays.
    private func waitForKey(_ entry: OutboxEntry) throws(KeychainError) -> SyncRecordRow? {
        if entry.counter != nil { try outbox.clearCounter(entry: entry.id) }
        return nil
    }
}
