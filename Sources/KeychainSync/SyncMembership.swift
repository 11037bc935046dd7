#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import KeychainStore

/// Access to the local store, through its replica port, taken once per step: the daemon's
/// version takes the store's lock for each and never across a PostgreSQL statement (read the
/// store, release, talk to the database, then write the store). An ItemStore used alone (a
/// test, the loop's own thread with its own lock) runs the body directly.
public protocol SyncLocalStore {
    func withReplica<T: Sendable>(_ body: (ItemReplica) throws(KeychainError) -> T) throws(KeychainError) -> T
}

extension ItemStore: SyncLocalStore {
    public func withReplica<T: Sendable>(_ body: (ItemReplica) throws(KeychainError) -> T) throws(KeychainError) -> T { try body(replica) }
}

/// The local circle row's states that membership sets (the loop adds its own).
public enum SyncCircleState {
    /// Joined, waiting for a member to approve this device and wrap it the key.
    public static let pending = "pending"
    /// Holds the circle key of the roster's epoch.
    public static let member = "member"
    /// The store's roster disagrees with the verified local copy: nothing more is applied.
    public static let forked = "forked"
    /// A member removed this device: it syncs no more and keeps its items.
    public static let removed = "removed"
}

/// What `keychain sync status` shows. Never a key: fingerprints, counts and states only.
public struct SyncStatusReport: Sendable, Equatable {
    /// off (no circle), waitingForUnlock (ck not loaded yet), or the circle row's state.
    public var state: String
    public var circleFingerprint: SyncFingerprint?
    public var deviceFingerprint: SyncFingerprint?
    public var epoch: UInt32
    public var members: Int
    public var outbox: Int
}

/// One device of `keychain sync devices`.
public struct SyncDeviceListing: Sendable, Equatable {
    public var id: SyncDeviceID
    public var fingerprint: SyncFingerprint
    /// As the device named itself in its self-signed request; empty when it has none.
    public var name: String
    public var isMember: Bool
}

/// What a refresh did.
public enum SyncRefreshOutcome: Sendable, Equatable {
    case notInCircle
    /// The roster was verified (possibly longer now); nothing else changed.
    case verified
    /// This pending device found its wrapped key and is a member now.
    case becameMember
    /// The store's roster disagrees with the local copy; the state is now forked.
    case forked(String)
    /// The circle rotated: this member unwrapped the key of `epoch` (its own rotation after a
    /// member left counts too) and pulls that epoch from seq 0 as a full reconcile.
    case newEpoch(UInt32)
    /// A `remove` entry names this device: it stops syncing.
    case removed
}

/// Create, join, approve, refresh, status and devices (docs/sync.md, section 3): the logic
/// over a local store and a PostgreSQL database. Each call verifies what it reads from the
/// database with the crypto of slice 1 before it writes anything locally.
public enum SyncMembership {
    /// Founds a circle: the identity if needed, a random circle id, CCK(1), entry 0, the rows.
    /// Returns the circle's fingerprint (what joining devices type) and this device's.
    public static func create(name: String, store: some SyncLocalStore,
                              database: SyncDatabase) throws(KeychainError) -> (circle: SyncFingerprint, device: SyncFingerprint) {
        try checkName(name)
        let identity = try store.withReplica { (s) throws(KeychainError) -> SyncDeviceIdentity in
            if try LocalCircle(s).row() != nil { throw alreadyInCircle }
            return try LocalCircle(s).identityMakingIfNeeded()
        }
        let circleID = SyncCircleID.random()
        let founder = try SyncJoinRequest.signed(by: identity, circleID: circleID, name: name)
        let roster = SyncRoster.found(circleID: circleID, by: identity, time: now())
        let key = SyncCircleKey.random(circleID: circleID, epoch: roster.epoch)
        try database.createSchema()
        try database.createCircle(roster, founder: founder)
        try store.withReplica { (s) throws(KeychainError) in
            try LocalCircle(s).enter(roster: roster, state: SyncCircleState.member, circleKey: key)
        }
        return (roster.circleFingerprint, identity.keys.fingerprint)
    }

    /// Joins the circle whose entry 0 gives exactly `circle`: checked before anything is
    /// written, here or in the database, so a look-alike circle run by the database's operator
    /// gets nothing. Inserts this device as pending; returns its own fingerprint, which a
    /// member types to approve it.
    public static func join(circle fingerprint: SyncFingerprint, name: String, store: some SyncLocalStore,
                            database: SyncDatabase) throws(KeychainError) -> SyncFingerprint {
        try checkName(name)
        // A pending device may join again (its request is replaced), but only the same circle.
        let pendingIn = try store.withReplica { (s) throws(KeychainError) -> [UInt8]? in
            guard let circle = try LocalCircle(s).row() else { return nil }
            guard circle.state == SyncCircleState.pending else { throw alreadyInCircle }
            return circle.circleID
        }
        let tables = try database.connection.query("SELECT to_regclass('sync_roster') IS NOT NULL")
        let founding = tables.rows.first?.first?.bool == true ? try database.foundingEntries() : []
        guard let entry0 = founding.first(where: { signed in
            (try? SyncRoster(verifying: [signed]))?.circleFingerprint == fingerprint
        }) else {
            throw KeychainError(.itemNotFound, "no circle in the sync database has the fingerprint \(fingerprint): check the digits on a member (`keychain sync status`)")
        }
        if let pendingIn, pendingIn != entry0.entry.circleID.bytes { throw alreadyInCircle }
        let roster = try SyncRoster(verifying: try database.roster(circleID: entry0.entry.circleID))
        guard roster.entries[0] == entry0 else {
            throw KeychainError(.decode, "the circle's founding entry changed while it was read")
        }
        let identity = try store.withReplica { (s) throws(KeychainError) in try LocalCircle(s).identityMakingIfNeeded() }
        guard roster.members[identity.id] == nil else {
            throw KeychainError(.duplicateItem, "this device is a member of that circle already")
        }
        try database.requestToJoin(try SyncJoinRequest.signed(by: identity, circleID: roster.circleID, name: name))
        try store.withReplica { (s) throws(KeychainError) in
            try LocalCircle(s).enter(roster: roster, state: SyncCircleState.pending, circleKey: nil)
        }
        return identity.keys.fingerprint
    }

    /// Approves the one pending device whose keys give exactly `device` (none:
    /// errSecItemNotFound): an `add` entry and CCK(e) wrapped to it, in one transaction.
    @discardableResult
    public static func approve(device fingerprint: SyncFingerprint, store: some SyncLocalStore,
                               database: SyncDatabase) throws(KeychainError) -> SyncDeviceListing {
        if case .forked(let why) = try refresh(store: store, database: database) {
            throw KeychainError(.decode, "sync is stopped: \(why)")
        }
        let (identity, roster, key) = try store.withReplica { (s) throws(KeychainError) in
            guard let roster = try LocalCircle(s).roster(), let identity = try LocalCircle(s).identity() else { throw notInCircle }
            guard roster.members[identity.id] != nil, let key = try LocalCircle(s).circleKey(epoch: roster.epoch) else {
                throw KeychainError(.notAvailable, "this device is not yet a member of its circle: a member must approve it first")
            }
            return (identity, roster, key)
        }
        let requests = try database.joinRequests(circleID: roster.circleID)
            .filter { $0.isSigned(by: fingerprint, for: roster.circleID) }
        if requests.contains(where: { roster.departed.contains($0.device.id) }) {
            throw KeychainError(.param, "the device \(fingerprint) left or was removed from this circle and is not approved again: on that device, `keychain sync leave` and then `keychain sync join` make it a new device with new digits to approve")
        }
        if requests.contains(where: { roster.members[$0.device.id] != nil }) {
            throw KeychainError(.duplicateItem, "the device \(fingerprint) is a member already")
        }
        guard let request = requests.first else {
            throw KeychainError(.itemNotFound, "no device waiting to join has the fingerprint \(fingerprint): check the digits on its screen")
        }
        let entry = try roster.signing(.add, subject: request.device, by: identity, time: now())
        let wrap = try SyncWrappedKey.wrap(key, to: request.device, by: identity)
        try database.append(entry, wrapping: wrap)
        var next = roster
        try next.append(entry)
        try store.withReplica { (s) throws(KeychainError) in
            try LocalCircle(s).refreshed(roster: next, state: try LocalCircle(s).row()?.state ?? SyncCircleState.member, circleKey: nil)
        }
        return SyncDeviceListing(id: request.device.id, fingerprint: request.device.fingerprint, name: request.name, isMember: true)
    }

    /// Reads the roster entries past the local copy, verifies them against it and stores
    /// them; a pending device that finds its wrapped key unwraps it, seals it under CK[ck] and
    /// becomes a member. A roster that disagrees with the local copy leaves the state forked
    /// and applies nothing. A member that finds the epoch moved unwraps the new key (from a
    /// member of the new roster, of exactly that epoch) and starts that epoch at cursor 0 with
    /// no full pull yet; one that finds itself removed stops (state removed, items kept); one
    /// that finds a member left rotates the key. The loop's pass runs this first.
    @discardableResult
    public static func refresh(store: some SyncLocalStore, database: SyncDatabase) throws(KeychainError) -> SyncRefreshOutcome {
        try refresh(store: store, database: database, mayRotate: true)
    }

    static func refresh(store: some SyncLocalStore, database: SyncDatabase,
                        mayRotate: Bool) throws(KeychainError) -> SyncRefreshOutcome {
        let local = try store.withReplica { (s) throws(KeychainError) in (try LocalCircle(s).row(), try LocalCircle(s).roster()) }
        guard let circle = local.0, let roster = local.1 else { return .notInCircle }
        if circle.state == SyncCircleState.forked {
            return .forked("the sync database's roster disagrees with the one this device verified")
        }
        if circle.state == SyncCircleState.removed { return .removed }
        var next = roster
        do throws(KeychainError) {
            try next.extend(with: try database.roster(circleID: roster.circleID))
        } catch where error.status == .decode {
            try store.withReplica { (s) throws(KeychainError) in try LocalCircle(s).setState(SyncCircleState.forked) }
            return .forked(error.message)
        }
        var state = circle.state
        var key: SyncCircleKey?
        var unwrapFailure: KeychainError?
        let identity = try store.withReplica { (s) throws(KeychainError) in try LocalCircle(s).identity() }
        let isMember = identity.map { next.members[$0.id] != nil } ?? false
        if state == SyncCircleState.member, !isMember, next.length > roster.length {
            // Only a `remove` entry drops a member other than by its own leave, which a device
            // that left no longer refreshes.
            try store.withReplica { (s) throws(KeychainError) in
                try LocalCircle(s).refreshed(roster: next, state: SyncCircleState.removed, circleKey: nil)
            }
            return .removed
        }
        // A pending device waits for its key; a member whose circle rotated needs the new one.
        let needsKey = state == SyncCircleState.pending || next.epoch != circle.epoch
        if let identity, isMember, needsKey,
           let wrap = try database.wrappedKey(circleID: next.circleID, epoch: next.epoch, device: identity.id) {
            do throws(KeychainError) {
                key = try wrap.unwrap(as: identity, roster: next)
                state = SyncCircleState.member
            } catch {
                unwrapFailure = error
            }
        }
        if state == SyncCircleState.member, next.epoch != circle.epoch, key == nil {
            // Keep the epoch this device holds the key of: pushes under it are refused
            // (.epochMoved) until the key of the new one arrives, and nothing is lost.
            let reason = unwrapFailure.map { "the circle key of epoch \(next.epoch) wrapped to this device was refused: \($0.message)" }
                ?? "no circle key of epoch \(next.epoch) is wrapped to this device"
            throw KeychainError(unwrapFailure?.status ?? .notAvailable, reason)
        }
        try store.withReplica { (s) throws(KeychainError) in try LocalCircle(s).refreshed(roster: next, state: state, circleKey: key) }
        if let unwrapFailure {
            throw KeychainError(unwrapFailure.status, "the circle key wrapped to this device was refused: \(unwrapFailure.message)")
        }
        if mayRotate, state == SyncCircleState.member, isMember, !next.awaitingRotation.isEmpty {
            // A member left: the first member to see it rotates (a second finds it done).
            if try SyncRotation.rotateAfterLeave(store: store, database: database) {
                return .newEpoch(next.epoch + 1)
            }
            return try refresh(store: store, database: database, mayRotate: false)
        }
        if key != nil, circle.state == SyncCircleState.pending { return .becameMember }
        return key != nil ? .newEpoch(next.epoch) : .verified
    }

    /// This device's view, from the local store alone (no network).
    public static func status(store: some SyncLocalStore) throws(KeychainError) -> SyncStatusReport {
        try store.withReplica { (s) throws(KeychainError) in
            let keys = try LocalCircle(s).deviceKeys()
            let outbox = try OutboxPush(s).count()
            guard let circle = try LocalCircle(s).row(), let roster = try LocalCircle(s).roster() else {
                return SyncStatusReport(state: "off", circleFingerprint: nil, deviceFingerprint: keys?.fingerprint,
                                        epoch: 0, members: 0, outbox: outbox)
            }
            let state = s.classKey(.afterFirstUnlock) != nil ? circle.state : "waitingForUnlock"
            return SyncStatusReport(state: state, circleFingerprint: roster.circleFingerprint, deviceFingerprint: keys?.fingerprint,
                                    epoch: roster.epoch, members: roster.members.count, outbox: outbox)
        }
    }

    /// The circle's members (in roster order) and the devices waiting to join, with the names
    /// their self-signed requests give. Requests whose signature does not verify are left out.
    public static func devices(store: some SyncLocalStore, database: SyncDatabase) throws(KeychainError) -> [SyncDeviceListing] {
        // A refresh that fails (a wrap refused, ck not loaded yet) still leaves a roster to list.
        _ = try? refresh(store: store, database: database)
        guard let roster = try store.withReplica({ (s) throws(KeychainError) in try LocalCircle(s).roster() }) else { throw notInCircle }
        let requests = try database.joinRequests(circleID: roster.circleID)
            .filter { $0.isSigned(by: $0.device.fingerprint, for: roster.circleID) }
        var names: [SyncDeviceID: String] = [:]
        for request in requests { names[request.device.id] = request.name }
        var out: [SyncDeviceListing] = []
        var listed = Set<SyncDeviceID>()
        for signed in roster.entries {
            let keys = signed.entry.subject
            guard let member = roster.members[keys.id], member == keys, listed.insert(keys.id).inserted else { continue }
            out.append(SyncDeviceListing(id: keys.id, fingerprint: keys.fingerprint, name: names[keys.id] ?? "", isMember: true))
        }
        // A departed device's request is never listed as waiting: it cannot be approved.
        for request in requests.sorted(by: { $0.device.id < $1.device.id })
        where !roster.departed.contains(request.device.id) && listed.insert(request.device.id).inserted {
            out.append(SyncDeviceListing(id: request.device.id, fingerprint: request.device.fingerprint, name: request.name,
                                         isMember: false))
        }
        return out
    }

    private static func checkName(_ name: String) throws(KeychainError) {
        guard name.utf8.count <= SyncJoinRequest.maxNameBytes else {
            throw KeychainError.param("a device name is at most \(SyncJoinRequest.maxNameBytes) bytes of UTF-8")
        }
    }

    private static let alreadyInCircle = KeychainError(.duplicateItem, "this keychain is in a sync circle already")
    private static let notInCircle = KeychainError(.notAvailable, "this keychain is in no sync circle: `keychain sync create` or `keychain sync join`")

    /// Milliseconds since 2001, the roster's (informative) time.
    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return (Int64(ts.tv_sec) - 978_307_200) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
