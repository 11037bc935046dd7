import KeychainModel
import KeychainProtocol

/// This device's sync state, as `keychain sync status` shows it (docs/sync.md, 7.4).
public struct SyncStatus: Sendable, Equatable {
    /// off, waitingForUnlock, pending, member or forked.
    public var state: String
    /// The 32 digits a joining device types; nil outside a circle.
    public var circleFingerprint: String?
    /// The 32 digits a member types to approve this device; nil before its identity exists.
    public var deviceFingerprint: String?
    public var epoch: Int
    public var members: Int
    /// Local changes waiting to be pushed.
    public var outbox: Int
    public var lastError: String?
    /// The sync thread: off, waitingForUnlock, pending, connecting, ok, error, forked,
    /// rolledBack (the store went back and the heal has not finished) or partitioned.
    public var loop: String = "off"
    /// When the sync thread's last pass succeeded, in ms since 2001; nil before the first.
    public var lastPass: Int64?
    /// Pulled records waiting for their class key (ak items while locked).
    public var inbox: Int = 0
    /// Since keychaind started: records pushed, records pulled, pulled records applied, and
    /// pulled records refused (not opening under the circle key, replays, malformed rows).
    public var pushed: Int = 0
    public var pulled: Int = 0
    public var applied: Int = 0
    public var rejected: Int = 0
    /// Since keychaind started: rollbacks of the store found and healed.
    public var rollbacksHealed: Int = 0
    /// Heads in the store that did not verify at the last check (never trusted).
    public var headsRejected: Int = 0
    /// Why the store was last found rolled back; nil if it has not been since keychaind started.
    public var lastRollback: String?
}

/// What founding or joining answered: the circle's fingerprint and this device's.
public struct SyncFingerprints: Sendable, Equatable {
    public var circle: String
    public var device: String
}

/// One device of the circle, a member or waiting to join.
public struct SyncDevice: Sendable, Equatable {
    /// 32 lowercase hex digits.
    public var id: String
    public var fingerprint: String
    public var name: String
    public var isMember: Bool
}

extension KeychainConnection {
    public func syncStatus() throws(KeychainError) -> SyncStatus {
        let a = try perform(Calls.attributes(.syncStatus, "sync status"))
        return SyncStatus(state: a["state"]?.stringValue ?? "", circleFingerprint: a["circle"]?.stringValue,
                          deviceFingerprint: a["device"]?.stringValue, epoch: a["epoch"]?.syncInt ?? 0,
                          members: a["members"]?.syncInt ?? 0, outbox: a["outbox"]?.syncInt ?? 0,
                          lastError: a["last_error"]?.stringValue, loop: a["loop"]?.stringValue ?? "off",
                          lastPass: a["last_pass"]?.syncInt.map(Int64.init), inbox: a["inbox"]?.syncInt ?? 0,
                          pushed: a["pushed"]?.syncInt ?? 0, pulled: a["pulled"]?.syncInt ?? 0, applied: a["applied"]?.syncInt ?? 0,
                          rejected: a["rejected"]?.syncInt ?? 0, rollbacksHealed: a["rollbacks_healed"]?.syncInt ?? 0,
                          headsRejected: a["heads_rejected"]?.syncInt ?? 0, lastRollback: a["last_rollback"]?.stringValue)
    }

    /// Founds a circle in the daemon's configured database (admin). `name` names this device
    /// to people (at most 64 bytes).
    public func syncCreate(name: String) throws(KeychainError) -> SyncFingerprints {
        let a = try perform(Calls.attributes(.syncCreate(name: name), "sync create"))
        return SyncFingerprints(circle: a["circle"]?.stringValue ?? "", device: a["device"]?.stringValue ?? "")
    }

    /// Asks to join the circle with fingerprint `circle` (admin); the answer's device
    /// fingerprint is what a member then approves.
    public func syncJoin(circle: String, name: String) throws(KeychainError) -> SyncFingerprints {
        let a = try perform(Calls.attributes(.syncJoin(circle: circle, name: name), "sync join"))
        return SyncFingerprints(circle: a["circle"]?.stringValue ?? "", device: a["device"]?.stringValue ?? "")
    }

    /// Approves the waiting device whose fingerprint is `device` (admin).
    public func syncApprove(device: String) throws(KeychainError) -> SyncDevice {
        Self.device(try perform(Calls.attributes(.syncApprove(device: device), "sync approve")))
    }

    /// Runs a sync pass now; returns once it has finished (pushed and pulled everything), or
    /// throws its error (errSecNotAvailable when none finished within keychaind's bound).
    public func syncNow() throws(KeychainError) {
        try perform(Calls.done(.syncNow))
    }

    /// Removes the member whose fingerprint is `device` and rotates the circle key (admin);
    /// returns the new epoch and how many records were re-sealed under it.
    public func syncRemove(device: String) throws(KeychainError) -> SyncRemoval {
        let a = try perform(Calls.attributes(.syncRemove(device: device), "sync remove"))
        return SyncRemoval(device: a["device"]?.stringValue ?? "", epoch: a["epoch"]?.syncInt ?? 0,
                           resealed: a["resealed"]?.syncInt ?? 0, dropped: a["dropped"]?.syncInt ?? 0)
    }

    /// Leaves the circle (admin): this device keeps its items and identity.
    public func syncLeave() throws(KeychainError) {
        try perform(Calls.done(.syncLeave))
    }

    public func syncDevices() throws(KeychainError) -> [SyncDevice] {
        let items = try perform(Calls.list(.syncDevices, "sync devices"))
        return items.compactMap { if case .attributes(let a) = $0 { Self.device(a) } else { nil } }
    }

    private static func device(_ a: AttributeDictionary) -> SyncDevice {
        SyncDevice(id: a["id"]?.stringValue ?? "", fingerprint: a["fingerprint"]?.stringValue ?? "",
                   name: a["name"]?.stringValue ?? "", isMember: a["member"]?.syncBool ?? false)
    }
}

extension Keychain {
    public func syncStatus() throws(KeychainError) -> SyncStatus { try connection.syncStatus() }
    public func syncCreate(name: String) throws(KeychainError) -> SyncFingerprints { try connection.syncCreate(name: name) }
    public func syncJoin(circle: String, name: String) throws(KeychainError) -> SyncFingerprints {
        try connection.syncJoin(circle: circle, name: name)
    }
    public func syncApprove(device: String) throws(KeychainError) -> SyncDevice { try connection.syncApprove(device: device) }
    public func syncDevices() throws(KeychainError) -> [SyncDevice] { try connection.syncDevices() }
    public func syncNow() throws(KeychainError) { try connection.syncNow() }
    public func syncRemove(device: String) throws(KeychainError) -> SyncRemoval { try connection.syncRemove(device: device) }
    public func syncLeave() throws(KeychainError) { try connection.syncLeave() }
}

/// What `sync remove` did: the removed device, the epoch it started, and the records carried
/// into it (re-sealed) or not (dropped: tombstones and rows that did not open).
public struct SyncRemoval: Sendable, Equatable {
    public var device: String
    public var epoch: Int
    public var resealed: Int
    public var dropped: Int
}

private extension AttributeValue {
    var syncInt: Int? { if case .int(let i) = self { Int(i) } else { nil } }
    var syncBool: Bool? { if case .bool(let b) = self { b } else { nil } }
}
