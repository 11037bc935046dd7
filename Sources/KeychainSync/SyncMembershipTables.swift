import KeychainModel
import KeychainStorage

/// The row of `sync_identity` (docs/sync.md, 7.3): the device's public keys in clear, its two
/// secret keys only as `sealedSecrets` (under CK[ck]; this table never sees them open).
public struct SyncIdentityRow: Sendable, Equatable {
    public var deviceID: [UInt8]
    public var signPublicKey: [UInt8]
    public var agreementPublicKey: [UInt8]
    public var sealedSecrets: [UInt8]

    public init(deviceID: [UInt8], signPublicKey: [UInt8], agreementPublicKey: [UInt8], sealedSecrets: [UInt8]) {
        self.deviceID = deviceID
        self.signPublicKey = signPublicKey
        self.agreementPublicKey = agreementPublicKey
        self.sealedSecrets = sealedSecrets
    }
}

/// `sync_identity`: at most one row, written once when a sync command first needs it.
public struct SyncIdentityTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    public func row() throws(KeychainError) -> SyncIdentityRow? {
        try db.query("SELECT device_id, sign_pk, kx_pk, sealed_secrets FROM sync_identity WHERE id = 1") {
            (s) throws(KeychainError) -> SyncIdentityRow? in
            guard try s.step() else { return nil }
            return SyncIdentityRow(deviceID: s.blob(0), signPublicKey: s.blob(1), agreementPublicKey: s.blob(2),
                                   sealedSecrets: s.blob(3))
        }
    }

    /// Inserts the identity; errSecDuplicateItem if one exists (an identity is never replaced:
    /// the circle knows this device by it).
    public func insert(_ row: SyncIdentityRow) throws(KeychainError) {
        try db.run("""
            INSERT INTO sync_identity(id, device_id, sign_pk, kx_pk, sealed_secrets) VALUES (1, ?, ?, ?, ?)
            ON CONFLICT(id) DO NOTHING
            """, [.blob(row.deviceID), .blob(row.signPublicKey), .blob(row.agreementPublicKey), .blob(row.sealedSecrets)])
        guard db.changes == 1 else { throw KeychainError(.duplicateItem, "this keychain already has a sync identity") }
    }
}

/// `sync_keys`: CCK(e) of each epoch this device holds, sealed under CK[ck].
public struct SyncKeysTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    public func sealedKey(circleID: [UInt8], epoch: UInt32) throws(KeychainError) -> [UInt8]? {
        try db.query("SELECT sealed_key FROM sync_keys WHERE circle_id = ? AND epoch = ?",
                     [.blob(circleID), .int(Int64(epoch))]) { (s) throws(KeychainError) -> [UInt8]? in
            try s.step() ? s.blob(0) : nil
        }
    }

    public func save(circleID: [UInt8], epoch: UInt32, sealedKey: [UInt8]) throws(KeychainError) {
        try db.run("""
            INSERT INTO sync_keys(circle_id, epoch, sealed_key) VALUES (?, ?, ?)
            ON CONFLICT(circle_id, epoch) DO UPDATE SET sealed_key = excluded.sealed_key
            """, [.blob(circleID), .int(Int64(epoch)), .blob(sealedKey)])
    }

    public func deleteAll() throws(KeychainError) { try db.run("DELETE FROM sync_keys") }
}

/// `sync_roster`: the entries this device verified, in order. Only verified entries are
/// written here, so reading them back re-verifies (a row altered on disk is refused then).
public struct SyncRosterTable {
    public let db: SQLiteDatabase

    public init(_ db: SQLiteDatabase) { self.db = db }

    /// (entry, signature) pairs of `circleID` by entry number.
    public func entries(circleID: [UInt8]) throws(KeychainError) -> [(entry: [UInt8], signature: [UInt8])] {
        try db.query("SELECT entry, sig FROM sync_roster WHERE circle_id = ? ORDER BY entry_no",
                     [.blob(circleID)]) { (s) throws(KeychainError) -> [(entry: [UInt8], signature: [UInt8])] in
            var out: [(entry: [UInt8], signature: [UInt8])] = []
            while try s.step() { out.append((s.blob(0), s.blob(1))) }
            return out
        }
    }

    /// Appends entry `number`; an existing number is left as it is (the caller checked it equal).
    public func append(circleID: [UInt8], number: UInt32, entry: [UInt8], signature: [UInt8]) throws(KeychainError) {
        try db.run("INSERT OR IGNORE INTO sync_roster(circle_id, entry_no, entry, sig) VALUES (?, ?, ?, ?)",
                   [.blob(circleID), .int(Int64(number)), .blob(entry), .blob(signature)])
    }

    public func deleteAll() throws(KeychainError) { try db.run("DELETE FROM sync_roster") }
}
