import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

/// The versions this device holds of its synced items (docs/sync.md, 5): the stamped one the
/// circle has, and the one a pending change stands for.
enum LocalVersion {
    /// The mdat of the version a pending entry of `row` stands for: the one fixed with its
    /// first number, or the item's own modification time, never at or before the version the
    /// circle has (docs/sync.md, 5).
    static func pendingMdat(_ entry: OutboxEntry, _ row: ItemRow) -> Int64 {
        if let mdat = entry.mdat { return mdat }
        return SyncVersion.stampedMdat(now: ItemReplica.milliseconds(row.modified), previous: row.replicaStamp.map { stampMdat($0, row) })
    }

    /// A stamp's mdat; one stamped by hand without it takes the row's.
    static func stampMdat(_ stamp: ReplicaStamp, _ row: ItemRow) -> Int64 {
        stamp.mdat ?? ItemReplica.milliseconds(row.modified)
    }

    /// The attributes a tombstone's kept blob holds (its primary key among them).
    static func attributes(of tombstone: OutboxTombstone, classKey: SecureKey) throws(KeychainError) -> AttributeDictionary {
        let plaintext = try ItemSealer.open(tombstone.blob, identity: tombstone.identity, classKey: classKey)
        var r = ByteReader(plaintext, failure: .decode)
        _ = try r.lengthPrefixed(max: KeychainLimits.maxSecretBytes)  // the secret: not needed
        let attributes = try AttributeCodec.decode(from: &r)
        guard r.isAtEnd else { throw KeychainError(.decode, "a tombstone's item has trailing bytes") }
        return attributes
    }
}
