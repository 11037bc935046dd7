import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// The local half of sync membership (docs/sync.md, 2.1, 2.2, 7.3): this device's identity,
/// the circle keys it holds and the roster it verified, in tables beside the items. Secrets
/// are sealed under CK[ck], which the replica port lends, so none of this opens before the
/// first unlock, and none of it is in a backup (backups carry items only: a restored keychain
/// is a new device). An erase drops it with the class keys (ReplicaStateTables).
public struct LocalCircle {
    let replica: ItemReplica

    public init(_ replica: ItemReplica) { self.replica = replica }

    private var database: SQLiteDatabase { replica.database }
    private var circleTable: SyncCircleTable { SyncCircleTable(database) }

    /// CK[ck], or errSecInteractionNotAllowed saying what to do: sync's keys are sealed under it.
    private func classKey() throws(KeychainError) -> SecureKey {
        guard let key = replica.classKey(.afterFirstUnlock) else {
            throw KeychainError(.interactionNotAllowed,
                                "the keychain has not been unlocked since keychaind started: sync keys open after the first unlock (`keychain unlock`)")
        }
        return key
    }

    /// This device's identity; nil when none was made yet.
    public func identity() throws(KeychainError) -> SyncDeviceIdentity? {
        guard let row = try SyncIdentityTable(database).row() else { return nil }
        let identity = try SyncDeviceIdentity(opening: row.sealedSecrets, id: try SyncDeviceID(row.deviceID),
                                              classKey: try classKey())
        guard identity.keys.signPublicKey == row.signPublicKey, identity.keys.agreementPublicKey == row.agreementPublicKey else {
            throw KeychainError(.decode, "the sync identity's public keys do not match its secrets: the row was altered")
        }
        return identity
    }

    /// This device's identity, made and stored now if it has none (first use of a sync command).
    public func identityMakingIfNeeded() throws(KeychainError) -> SyncDeviceIdentity {
        if let existing = try identity() { return existing }
        let classKey = try classKey()
        let identity = SyncDeviceIdentity.generate()
        try database.transaction { () throws(KeychainError) in
            try SyncIdentityTable(database).insert(SyncIdentityRow(
                deviceID: identity.id.bytes, signPublicKey: identity.keys.signPublicKey,
                agreementPublicKey: identity.keys.agreementPublicKey, sealedSecrets: identity.sealed(under: classKey)))
        }
        return identity
    }

    /// This device's public keys, read without any class key (status before the first
    /// unlock); nil when it has no identity. errSecDecode if the row's id is not its keys'.
    public func deviceKeys() throws(KeychainError) -> SyncDeviceKeys? {
        guard let row = try SyncIdentityTable(database).row() else { return nil }
        let keys = try SyncDeviceKeys(signPublicKey: row.signPublicKey, agreementPublicKey: row.agreementPublicKey)
        guard keys.id.bytes == row.deviceID else {
            throw KeychainError(.decode, "the sync identity's id is not its keys' id: the row was altered")
        }
        return keys
    }

    /// The circle row; nil outside any circle.
    public func row() throws(KeychainError) -> SyncCircleRow? { try circleTable.row() }

    /// CCK(epoch) of this device's circle; nil if it holds none for that epoch (or is in no
    /// circle). ck locked: errSecInteractionNotAllowed.
    public func circleKey(epoch: UInt32) throws(KeychainError) -> SyncCircleKey? {
        guard let circle = try circleTable.row(),
              let sealed = try SyncKeysTable(database).sealedKey(circleID: circle.circleID, epoch: epoch) else { return nil }
        return try SyncCircleKey(opening: sealed, circleID: try SyncCircleID(circle.circleID), epoch: epoch,
                                 classKey: try classKey())
    }

    /// The roster this device verified, verified again as it is read (a row altered on disk
    /// is errSecDecode, never believed); nil outside any circle.
    public func roster() throws(KeychainError) -> SyncRoster? {
        guard let circle = try circleTable.row() else { return nil }
        let rows = try SyncRosterTable(database).entries(circleID: circle.circleID)
        guard !rows.isEmpty else { return nil }
        var signed: [SignedRosterEntry] = []
        for row in rows {
            signed.append(SignedRosterEntry(entry: try SyncRosterEntry(decoding: row.entry), signature: row.signature))
        }
        let roster = try SyncRoster(verifying: signed)
        guard roster.circleID.bytes == circle.circleID else {
            throw KeychainError(.decode, "the local roster is of another circle than the circle row: it was altered")
        }
        return roster
    }

    /// Enters a circle (create or join) in one transaction: the row, the verified roster, and
    /// the circle key when this device already has it (the founder; a joiner gets it later).
    public func enter(roster: SyncRoster, state: String, circleKey: SyncCircleKey?) throws(KeychainError) {
        let classKey = try classKey()
        let circle = SyncCircleRow(circleID: roster.circleID.bytes, epoch: roster.epoch, state: state,
                                   storeRosterLength: roster.length, storeRosterHash: roster.hash)
        try database.transaction { () throws(KeychainError) in
            if let existing = try circleTable.row(), existing.circleID != circle.circleID {
                throw KeychainError(.duplicateItem, "this keychain is already in another sync circle")
            }
            try SyncRosterTable(database).deleteAll()
            try SyncHeadsSeenTable(database).replace(with: [:])
            try circleTable.save(circle)
            try appendRoster(roster, circleID: circle.circleID)
            if let circleKey {
                try SyncKeysTable(database).save(circleID: circle.circleID, epoch: circleKey.epoch,
                                                 sealedKey: circleKey.sealed(under: classKey))
            }
        }
    }

    /// Stores what a refresh verified: the longer roster, the circle's epoch and state, the
    /// store's roster length and hash, and a circle key newly unwrapped. One transaction.
    public func refreshed(roster: SyncRoster, state: String, circleKey: SyncCircleKey?) throws(KeychainError) {
        let classKey = try classKey()
        try database.transaction { () throws(KeychainError) in
            guard var circle = try circleTable.row(), circle.circleID == roster.circleID.bytes else {
                throw KeychainError(.notAvailable, "this keychain is in no sync circle")
            }
            try appendRoster(roster, circleID: circle.circleID)
            if let circleKey {
                try SyncKeysTable(database).save(circleID: circle.circleID, epoch: circleKey.epoch,
                                                 sealedKey: circleKey.sealed(under: classKey))
            }
            if circle.epoch != roster.epoch {
                // Every row of the store is of the new epoch, with new ids and seqs: the next
                // pass reads them all, as a full reconcile (docs/sync.md, section 3).
                circle.cursor = 0
                circle.lastFullPull = nil
            }
            circle.epoch = roster.epoch
            circle.state = state
            circle.storeRosterLength = roster.length
            circle.storeRosterHash = roster.hash
            try circleTable.save(circle)
        }
    }

    /// Leaves the circle locally: the row, the circle keys, the roster and the identity go in
    /// one transaction; every item stays. A later create or join makes a new identity: a
    /// circle never takes back a device that left or was removed (SyncRoster.departed).
    public func leave() throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in
            try StampedItems(replica).unstampAll()
            try database.run("DELETE FROM sync_identity")
            try circleTable.delete()
            try SyncKeysTable(database).deleteAll()
            try SyncRosterTable(database).deleteAll()
            try SyncHeadsSeenTable(database).replace(with: [:])
            try LocalTombstones(replica).deleteAll()
        }
    }

    /// Sets the circle's state alone (a fork found: nothing else changes).
    public func setState(_ state: String) throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in try circleTable.setState(state) }
    }

    /// Records that a pull reading every row (mode everyRow) reached the end of the store:
    /// later pulls run afterCursor, where an old counter of a writer is a replay.
    public func fullPullEnded(at mdat: Int64) throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in try circleTable.setLastFullPull(mdat) }
    }

    /// The local circle row must be `circleKey`'s circle: rows are numbered and cursors kept
    /// for the circle this device is in.
    func check(_ circleKey: SyncCircleKey) throws(KeychainError) {
        guard let circle = try circleTable.row() else {
            throw KeychainError(.notAvailable, "this keychain is in no sync circle")
        }
        guard circle.circleID == circleKey.circleID.bytes else {
            throw KeychainError(.param, "the circle key is not of the circle this keychain is in")
        }
    }

    private func appendRoster(_ roster: SyncRoster, circleID: [UInt8]) throws(KeychainError) {
        let table = SyncRosterTable(database)
        for signed in roster.entries {
            try table.append(circleID: circleID, number: signed.entry.number, entry: signed.entry.encoded,
                             signature: signed.signature)
        }
    }
}
