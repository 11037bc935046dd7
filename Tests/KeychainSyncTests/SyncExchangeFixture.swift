import KeychainCrypto
import KeychainModel
import KeychainStorage
@testable import KeychainSync
import Testing
@testable import KeychainStore
import StoreTestSupport

/// The store's side of sync_records in memory, with the rules of docs/sync.md 7.1: one row per
/// record id, replaced only by a greater tuple, each write given the next seq.
final class MemoryRecordStore {
    private(set) var rows: [[UInt8]: SyncRecordRow] = [:]
    private(set) var seq: Int64 = 0

    /// Upserts `pushed`; returns the record ids whose push lost to the row already there.
    @discardableResult
    func push(_ pushed: [SyncRecordRow]) -> Set<[UInt8]> {
        var lost: Set<[UInt8]> = []
        for var row in pushed {
            if let held = rows[row.recordID], row.version <= held.version {
                if row.version < held.version { lost.insert(row.recordID) }
                continue
            }
            seq += 1
            row.seq = seq
            rows[row.recordID] = row
        }
        return lost
    }

    func rows(after cursor: Int64) -> [SyncRecordRow] {
        rows.values.filter { $0.seq > cursor }.sorted { $0.seq < $1.seq }
    }

    /// Serves `row` again as the store's latest write (a replay, or an operator's edit).
    func serve(_ row: SyncRecordRow) {
        var served = row
        seq += 1
        served.seq = seq
        rows[row.recordID] = served
    }
}

/// Two keychains (different device keys, so different lookup hashes) in one circle, sharing
/// one circle key and exchanging rows through a MemoryRecordStore.
final class SyncPair {
    let a: TemporaryStore
    let b: TemporaryStore
    let circleKey = SyncCircleKey.random(circleID: .random(), epoch: 1)
    /// A's id sorts before B's, so a tie in mdat goes to B.
    let idA = try! SyncDeviceID([UInt8](repeating: 0x0A, count: 16))
    let idB = try! SyncDeviceID([UInt8](repeating: 0x0B, count: 16))
    let records = MemoryRecordStore()
    static let scope = TemporaryStore.app

    init() throws {
        a = try TemporaryStore()
        b = try TemporaryStore()
        for t in [a, b] {
            try SyncCircleTable(t.store.database).save(SyncCircleRow(circleID: circleKey.circleID.bytes, epoch: 1, state: "ok"))
        }
    }

    func id(_ t: TemporaryStore) -> SyncDeviceID { t === a ? idA : idB }

    /// What `t` would push now, sealed (not yet pushed).
    func outgoing(_ t: TemporaryStore, limit: Int = 500) throws -> [SyncOutgoingRecord] {
        try OutboxPush(t.store.replica).outgoing(circleKey: circleKey, writer: id(t), limit: limit)
    }

    /// One push: seal, upsert into the store, and confirm.
    @discardableResult
    func push(_ t: TemporaryStore) throws -> [SyncOutgoingRecord] {
        let sent = try outgoing(t)
        records.push(sent.map(\.row))
        try OutboxPush(t.store.replica).pushed(sent)
        return sent
    }

    /// One pull of everything after `t`'s cursor, applied with the cursor in one batch.
    @discardableResult
    func pull(_ t: TemporaryStore, mode: SyncPullMode = .afterCursor) throws -> SyncApplyReport {
        try apply(records.rows(after: cursor(t)), to: t, mode: mode)
    }

    func apply(_ rows: [SyncRecordRow], to t: TemporaryStore, mode: SyncPullMode = .afterCursor) throws -> SyncApplyReport {
        let cursor = max(try cursor(t), rows.map(\.seq).max() ?? 0)
        return try PulledRows(t.store.replica).apply(rows, circleKey: circleKey, writer: id(t), mode: mode, cursor: cursor)
    }

    func cursor(_ t: TemporaryStore) throws -> Int64 { try SyncCircleTable(t.store.database).row()?.cursor ?? -1 }

    /// Both directions until nothing moves: push and pull on each, `first` first.
    func exchange(first: TemporaryStore, then second: TemporaryStore) throws {
        for _ in 0..<2 {
            try push(first)
            try pull(second)
            try push(second)
            try pull(first)
        }
    }

    func outbox(_ t: TemporaryStore) throws -> [OutboxEntry] { try OutboxTable(t.store.database).entries() }

    /// The one synced item `query` finds, as r_Attributes gives it, or nil.
    func item(_ t: TemporaryStore, _ query: AttributeDictionary) throws -> AttributeDictionary? {
        var q = query
        q["sync"] = .int(1)
        q["r_Attributes"] = .bool(true)
        q["r_Data"] = .bool(true)
        do {
            guard case .single(.attributes(let found)) = try t.copy(q) else { return nil }
            return found
        } catch let error as KeychainError where error.status == .itemNotFound {
            return nil
        }
    }

    /// The items-table row of `t`'s one synced generic password.
    func syncedRow(_ t: TemporaryStore) throws -> ItemRow? {
        var found: ItemRow?
        try t.store.table.forEach(RowFilter(itemClass: .genericPassword, accessGroups: Self.scope.groups, sync: 1)) { row in
            found = row
            return false
        }
        return found
    }
}

let synced: AttributeDictionary = ["sync": .int(1)]

func syncedGenp(_ service: String, _ account: String, _ extra: AttributeDictionary = [:]) -> AttributeDictionary {
    genp(service, account, synced.merging(extra) { $1 })
}
