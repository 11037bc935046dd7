/// How a pulled record reached the device: after its cursor, where each writer's counters only
/// rise (pushes serialize on the circle row), or in a read of every row (a first sync, a full
/// reconcile), where older counters legitimately reappear.
public enum SyncPullMode: Sendable {
    case afterCursor
    case everyRow
}

/// What to do with one pulled record that opened (docs/sync.md, section 6).
public enum SyncPullDecision: Sendable, Equatable {
    case apply
    /// Older than or the same as what this device holds: dropped, not an error.
    case superseded
    /// A writer's counter at or below one already seen after the cursor: the store replayed
    /// an old record. Rejected and counted.
    case replay
}

/// The highest counter seen from each writer (`sync_writers_seen`): what turns an old record
/// served again after the cursor into a detected replay rather than a silent no-op.
public struct SyncWriterLedger: Sendable, Equatable {
    public private(set) var highestCounter: [SyncDeviceID: Int64]

    public init(highestCounter: [SyncDeviceID: Int64] = [:]) {
        self.highestCounter = highestCounter
    }

    /// Decides on `incoming` against the local version of the same item, and records its
    /// counter when it is not a replay.
    public mutating func admit(_ incoming: SyncVersion, local: SyncVersion?, mode: SyncPullMode) -> SyncPullDecision {
        let seen = highestCounter[incoming.writer]
        if mode == .afterCursor, let seen, incoming.counter <= seen { return .replay }
        highestCounter[incoming.writer] = max(seen ?? incoming.counter, incoming.counter)
        return SyncConflict.resolve(local: local, incoming: incoming) == .takeIncoming ? .apply : .superseded
    }
}

/// One device's signed head as the rollback check needs it: how far its writes go and how
/// long a roster it had seen.
public struct SyncHeadPosition: Sendable, Equatable {
    public var counter: Int64
    public var rosterLength: Int

    public init(counter: Int64, rosterLength: Int) {
        self.counter = counter
        self.rosterLength = rosterLength
    }
}

/// What the store shows at the start of a sync, or what a device remembers of it.
public struct SyncStoreView: Sendable, Equatable {
    /// The circle's last seq handed out (the store's) or this device's cursor (remembered).
    public var seq: Int64
    public var rosterLength: Int
    /// Verified heads, by writer.
    public var heads: [SyncDeviceID: SyncHeadPosition]

    public init(seq: Int64, rosterLength: Int, heads: [SyncDeviceID: SyncHeadPosition]) {
        self.seq = seq
        self.rosterLength = rosterLength
        self.heads = heads
    }
}

/// The store compared with what this device has already seen of it (docs/sync.md, section 6).
public enum SyncStoreState: Sendable, Equatable {
    case consistent
    /// The store is behind something this device saw: a restored backup or a stale replica
    /// promoted. Sync stops pulling and re-pushes.
    case rolledBack(String)
    /// A head names a longer roster than the store shows this device: entries are withheld.
    case partitioned

    public static func check(store: SyncStoreView, remembered: SyncStoreView) -> SyncStoreState {
        if store.seq < remembered.seq {
            return .rolledBack("the circle's seq \(store.seq) is below this device's cursor \(remembered.seq)")
        }
        if store.rosterLength < remembered.rosterLength {
            return .rolledBack("the roster has \(store.rosterLength) entries, this device verified \(remembered.rosterLength)")
        }
        for (writer, seen) in remembered.heads {
            guard let head = store.heads[writer] else {
                return .rolledBack("the head of device \(writer) is gone")
            }
            if head.counter < seen.counter {
                return .rolledBack("the head of device \(writer) is at \(head.counter), below \(seen.counter) seen before")
            }
        }
        if store.heads.values.contains(where: { $0.rosterLength > store.rosterLength }) {
            return .partitioned
        }
        return .consistent
    }
}
