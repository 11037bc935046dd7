import KeychainCrypto
import KeychainModel
import KeychainStore

/// Remove, leave and the rotation both end in (docs/sync.md, section 3): a `remove` entry,
/// a fresh circle key wrapped to every remaining member, and every record re-sealed under
/// it, in one PostgreSQL transaction. What a departed device still holds opens nothing
/// written afterwards, and its rows of the old epoch are gone.
public enum SyncRotation {
    /// Removes the member whose keys give exactly `device` (an admin call, on a member).
    /// This device: errSecParam (leave instead); no such member: errSecItemNotFound.
    @discardableResult
    public static func remove(device fingerprint: SyncFingerprint, store: some SyncLocalStore,
                              database: SyncDatabase) throws(KeychainError) -> SyncRotationCount {
        if case .forked(let why) = try SyncMembership.refresh(store: store, database: database) {
            throw KeychainError(.decode, "sync is stopped: \(why)")
        }
        let member = try heldMembership(store)
        guard member.identity.keys.fingerprint != fingerprint else {
            throw KeychainError.param("a device does not remove itself: `keychain sync leave`")
        }
        guard let subject = member.roster.members.values.first(where: { $0.fingerprint == fingerprint }) else {
            throw KeychainError(.itemNotFound, "no member of the circle has the fingerprint \(fingerprint): see `keychain sync devices`")
        }
        return try rotate(removing: subject, member, store: store, database: database)
    }

    /// Leaves the circle (an admin call, on the leaving device): a self-signed `leave` entry,
    /// then the circle row, keys, roster and identity go locally; every item stays. The next
    /// member to refresh rotates the key. A pending device withdraws its request.
    public static func leave(store: some SyncLocalStore, database: SyncDatabase) throws(KeychainError) {
        if case .forked(let why) = try SyncMembership.refresh(store: store, database: database) {
            throw KeychainError(.decode, "sync is stopped: \(why)")
        }
        let local = try store.withReplica { (s) throws(KeychainError) in (try LocalCircle(s).roster(), try LocalCircle(s).identity()) }
        guard let roster = local.0, let identity = local.1 else {
            throw KeychainError(.notAvailable, "this keychain is in no sync circle")
        }
        if roster.members[identity.id] != nil {
            let entry = try roster.signing(.leave, subject: identity.keys, by: identity, time: SyncMembership.now())
            try database.append(entry, wrapping: nil)
        } else {
            try database.withdrawJoinRequest(circleID: roster.circleID, device: identity.id)
        }
        try store.withReplica { (s) throws(KeychainError) in try LocalCircle(s).leave() }
    }

    /// After a refresh that found devices gone by `leave`: rotates, naming one of them (the
    /// one `remove` entry ends the wait for all). A member that rotated first wins; the loser
    /// finds the roster grown (errSecNotAvailable), which the caller's next refresh adopts.
    static func rotateAfterLeave(store: some SyncLocalStore, database: SyncDatabase) throws(KeychainError) -> Bool {
        let member = try heldMembership(store)
        guard let departed = member.roster.entries.last(where: { signed in
            signed.entry.kind == .leave && member.roster.awaitingRotation.contains(signed.entry.subject.id)
        })?.entry.subject else { return false }
        do {
            try rotate(removing: departed, member, store: store, database: database)
        } catch where error.status == .notAvailable {
            return false
        }
        return true
    }

    private struct Membership {
        var identity: SyncDeviceIdentity
        var roster: SyncRoster
        var key: SyncCircleKey
    }

    private static func heldMembership(_ store: some SyncLocalStore) throws(KeychainError) -> Membership {
        try store.withReplica { (s) throws(KeychainError) -> Membership in
            guard let roster = try LocalCircle(s).roster(), let identity = try LocalCircle(s).identity() else {
                throw KeychainError(.notAvailable, "this keychain is in no sync circle")
            }
            guard roster.members[identity.id] != nil, let key = try LocalCircle(s).circleKey(epoch: roster.epoch) else {
                throw KeychainError(.notAvailable, "this device does not hold the circle's current key")
            }
            return Membership(identity: identity, roster: roster, key: key)
        }
    }

    @discardableResult
    private static func rotate(removing subject: SyncDeviceKeys, _ member: Membership, store: some SyncLocalStore,
                               database: SyncDatabase) throws(KeychainError) -> SyncRotationCount {
        let entry = try member.roster.signing(.remove, subject: subject, by: member.identity, time: SyncMembership.now())
        var next = member.roster
        try next.append(entry)
        let key = SyncCircleKey.random(circleID: next.circleID, epoch: next.epoch)
        var wraps: [SyncWrappedKey] = []
        for keys in next.members.values { wraps.append(try SyncWrappedKey.wrap(key, to: keys, by: member.identity)) }
        let old = member.key
        let count = try database.rotate(entry, wraps: wraps) { (row) throws(KeychainError) -> SyncRecordRow? in
            try reseal(row, from: old, to: key)
        }
        try store.withReplica { (s) throws(KeychainError) in
            try LocalCircle(s).refreshed(roster: next, state: SyncCircleState.member, circleKey: key)
        }
        return count
    }

    /// `row` opened under the old key and sealed under the new one, with its item's record id
    /// under the new RIK and the same version; nil for a row that does not open. A tombstone
    /// is dropped too: its plaintext names only a class, so no record id under the new key
    /// can be computed for it, and the row would name nothing any device could match.
    static func reseal(_ row: SyncRecordRow, from old: SyncCircleKey, to new: SyncCircleKey) throws(KeychainError) -> SyncRecordRow? {
        guard !row.tombstone else { return nil }
        let header = SyncRecordHeader(circleID: old.circleID, recordID: row.recordID, epoch: row.epoch,
                                      version: row.version, tombstone: false)
        guard case .item(let itemClass, let protection, let attributes)? = try? SyncRecordSealer.open(header, body: row.body, circleKey: old) else {
            return nil
        }
        let (sealed, body) = try SyncRecordSealer.seal(itemClass, protection, attributes, version: row.version, circleKey: new)
        return SyncRecordRow(recordID: sealed.recordID, epoch: sealed.epoch, version: row.version, tombstone: false, body: body)
    }
}
