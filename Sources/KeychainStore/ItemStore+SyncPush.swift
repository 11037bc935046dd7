import KeychainCrypto
import KeychainModel
import KeychainStorage

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
extension ItemStore {
    /// Up to `limit` pending changes sealed under `circleKey` as rows of its epoch, in counter
    /// order. An entry pushed for the first time is numbered now and its item stamped with the
    /// version, in one local transaction; an entry given its number before keeps it and its
    /// mdat, so a retry after a lost acknowledgement carries the same tuple. Entries whose
    /// class key is not loaded stay queued and are left out. Nothing is removed from the
    /// outbox: `syncPushed` does that once the push committed.
    public func syncOutgoing(circleKey: SyncCircleKey, writer: SyncDeviceID, limit: Int) throws(KeychainError) -> [SyncOutgoingRecord] {
        guard limit > 0 else { return [] }
        // Every transaction moves the generation, which the Secret Service bridge reports as
        // a change: a pass with nothing to send, or only entries waiting for a key, commits none.
        var anything = false
        for entry in try syncOutbox.entries() where try mayGoOrChange(entry) {
            anything = true
            break
        }
        guard anything else { return [] }
        return try database.transaction { () throws(KeychainError) -> [SyncOutgoingRecord] in
            try checkCircle(circleKey)
            var out: [SyncOutgoingRecord] = []
            for entry in try Self.pushOrder(syncOutbox.entries()) {
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
    public func syncPushed(_ records: [SyncOutgoingRecord]) throws(KeychainError) {
        guard !records.isEmpty else { return }
        try database.transaction { () throws(KeychainError) in
            for record in records {
                try syncOutbox.deletePushed(entry: record.outboxID, counter: record.row.version.counter)
            }
        }
    }

    /// Entries already numbered first, by number (a retry must not follow higher counters),
    /// then the rest in the order of the local writes: the writer's counters then rise with
    /// the store's seq, which the replay check of every other device relies on.
    static func pushOrder(_ entries: [SyncOutboxEntry]) -> [SyncOutboxEntry] {
        let numbered = entries.filter { $0.counter != nil }.sorted { $0.counter! < $1.counter! }
        return numbered + entries.filter { $0.counter == nil }
    }

    /// The row for one entry, or nil when it cannot go now (its class is locked) or ever (its
    /// item no longer syncs or does not open: the entry is dropped).
    private func outgoingRecord(_ entry: SyncOutboxEntry, circleKey: SyncCircleKey,
                                writer: SyncDeviceID) throws(KeychainError) -> SyncRecordRow? {
        switch entry.change {
        case .version(let rowid):
            guard let row = try table.row(rowid: rowid), row.sync == 1, let pdmn = row.protection, !pdmn.isThisDeviceOnly else {
                try syncOutbox.delete(entry: entry.id)
                return nil
            }
            guard let key = keybag.key(for: pdmn) else { return try waitForKey(entry) }
            let item: StoredItem
            do throws(KeychainError) {
                item = try codec.open(row, classKey: key, withAttributes: true)
            } catch where error.status == .decode {
                try syncOutbox.delete(entry: entry.id)  // altered: it opens for nobody
                return nil
            }
            let version = try numbered(entry, writer: writer, mdat: pendingVersionMdat(entry, row))
            if entry.counter == nil {
                try table.setSyncStamp(SyncStamp(writer: writer.bytes, counter: version.counter, mdat: version.mdat), rowid: rowid)
            }
            var attributes = item.attributes
            attributes["v_Data"] = .data(item.data)
            let (header, body) = try SyncRecordSealer.seal(row.itemClass, pdmn, attributes, version: version, circleKey: circleKey)
            return SyncRecordRow(recordID: header.recordID, epoch: header.epoch, version: version, tombstone: false, body: body)
        case .tombstone(let tombstone):
            guard let key = keybag.key(for: tombstone.protection) else { return try waitForKey(entry) }
            let recordID: [UInt8]
            do throws(KeychainError) {
                recordID = try circleKey.recordID(of: tombstone.itemClass, attributes: Self.attributes(of: tombstone, classKey: key))
            } catch where error.status == .decode {
                try syncOutbox.delete(entry: entry.id)
                return nil
            }
            let version = try numbered(entry, writer: writer, mdat: tombstone.mdat)
            let (header, body) = SyncRecordSealer.sealTombstone(tombstone.itemClass, recordID: recordID, version: version, circleKey: circleKey)
            return SyncRecordRow(recordID: header.recordID, epoch: header.epoch, version: version, tombstone: true, body: body)
        }
    }

    /// Whether `entry` would be sent or changed now: false only for one that waits for its
    /// class key without a counter to give back.
    private func mayGoOrChange(_ entry: SyncOutboxEntry) throws(KeychainError) -> Bool {
        guard entry.counter == nil else { return true }
        switch entry.change {
        case .version(let rowid):
            guard let pdmn = try table.row(rowid: rowid)?.protection else { return true }
            return keybag.key(for: pdmn) != nil || pdmn.isThisDeviceOnly
        case .tombstone(let tombstone):
            return keybag.key(for: tombstone.protection) != nil
        }
    }

    /// The entry's version: the one it was given, or a new number now, kept in the outbox.
    private func numbered(_ entry: SyncOutboxEntry, writer: SyncDeviceID, mdat: Int64) throws(KeychainError) -> SyncVersion {
        if let counter = entry.counter { return SyncVersion(mdat: mdat, writer: writer, counter: counter) }
        let counter = try SyncCircleTable(database).nextCounter()
        try syncOutbox.setCounter(counter, mdat: mdat, entry: entry.id)
        return SyncVersion(mdat: mdat, writer: writer, counter: counter)
    }

    /// A locked entry gives its number back: later entries go out with higher ones meanwhile,
    /// and this one must not follow them under a lower number. Its mdat stays.
    private func waitForKey(_ entry: SyncOutboxEntry) throws(KeychainError) -> SyncRecordRow? {
        if entry.counter != nil { try syncOutbox.clearCounter(entry: entry.id) }
        return nil
    }

    /// The mdat of the version a pending entry of `row` stands for: the one fixed with its
    /// first number, or the item's own modification time, never at or before the version the
    /// circle has (docs/sync.md, 5).
    func pendingVersionMdat(_ entry: SyncOutboxEntry, _ row: ItemRow) -> Int64 {
        if let mdat = entry.mdat { return mdat }
        return SyncVersion.stampedMdat(now: Self.milliseconds(row.modified), previous: row.syncStamp.map { stampMdat($0, row) })
    }

    /// A stamp's mdat; one stamped by hand without it takes the row's.
    func stampMdat(_ stamp: SyncStamp, _ row: ItemRow) -> Int64 {
        stamp.mdat ?? Self.milliseconds(row.modified)
    }

    /// The attributes a tombstone's kept blob holds (its primary key among them).
    static func attributes(of tombstone: SyncTombstone, classKey: SecureKey) throws(KeychainError) -> AttributeDictionary {
        let plaintext = try ItemSealer.open(tombstone.blob, identity: tombstone.identity, classKey: classKey)
        var r = ByteReader(plaintext, failure: .decode)
        _ = try r.lengthPrefixed(max: KeychainLimits.maxSecretBytes)  // the secret: not needed
        let attributes = try AttributeCodec.decode(from: &r)
        guard r.isAtEnd else { throw KeychainError(.decode, "a tombstone's item has trailing bytes") }
        return attributes
    }

    /// The local circle row must be `circleKey`'s circle: rows are numbered and cursors kept
    /// for the circle this device is in.
    func checkCircle(_ circleKey: SyncCircleKey) throws(KeychainError) {
        guard let circle = try SyncCircleTable(database).row() else {
            throw KeychainError(.notAvailable, "this keychain is in no sync circle")
        }
        guard circle.circleID == circleKey.circleID.bytes else {
            throw KeychainError(.param, "the circle key is not of the circle this keychain is in")
        }
    }
}
