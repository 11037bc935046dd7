#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel

/// Which of the keychain's files a state directory holds, and whether the store may start
/// from them. New key material is made only where there is no keychain at all: a keychain
/// missing a part is refused, never completed with a new part that would leave the rest
/// unreadable (a new device key cannot open the old keybag; a new database hides the old).
///
/// A first start writes keychain.db (empty) first, then device.key, then the schema and the
/// keybag, then the generation record, so that a first start interrupted at any point leaves
/// a directory this accepts: an empty database alone is no keychain yet, and a database
/// whose keybag was never saved has nothing to lose (ItemStore checks that).
struct StateInventory {
    let configuration: StoreConfiguration
    let hasDeviceKey: Bool
    let hasDatabaseFile: Bool
    /// keychain.db or its write-ahead log holds any byte.
    let databaseHoldsData: Bool
    let hasRecord: Bool

    init(_ configuration: StoreConfiguration) {
        self.configuration = configuration
        hasDeviceKey = Self.size(configuration.deviceKeyPath) != nil
        let database = Self.size(configuration.databasePath)
        hasDatabaseFile = database != nil
        databaseHoldsData = (database ?? 0) > 0 || (Self.size(configuration.databasePath + "-wal") ?? 0) > 0
        hasRecord = Self.size(configuration.generationRecordPath) != nil
    }

    /// True for a first start (no keychain here yet: make one); false for a keychain to open;
    /// errSecDecode or errSecNotAvailable, naming the files, for a keychain missing a part.
    func isFirstStart() throws(KeychainError) -> Bool {
        let key = configuration.deviceKeyPath, db = configuration.databasePath
        let record = configuration.generationRecordPath
        if let credential = configuration.deviceKeyCredential {
            try checkStateKeyMatches(credential)
            // The credential is the key: a keychain without a database is new only if no
            // record says one was here.
            if !hasDatabaseFile, hasRecord {
                throw KeychainError(.notAvailable, "\(record) says a keychain was here, but \(db) is gone. Restore it from a backup; or, to start a new, empty keychain under the credential's key, remove \(record).")
            }
            return !hasDatabaseFile && !databaseHoldsData
        }
        if hasDeviceKey {
            guard hasDatabaseFile else {
                // Without a record this may be an older keychaind's interrupted first start
                // (it made the key first); with one, a database was there and is gone.
                let otherwise = hasRecord
                    ? "To give up this keychain and start an empty one, move \(key) and \(record) aside."
                    : "If it is what a first start interrupted by an older keychaind left (nothing was ever stored), remove \(key) and start again."
                throw KeychainError(.notAvailable, "\(key) exists but \(db) does not. If this keychain ever held anything, restore \(db) from a backup; keychaind will not make an empty database beside an old device key. \(otherwise)")
            }
            return false
        }
        if databaseHoldsData {
            throw KeychainError(.decode, "\(db) exists but \(key) does not: without the device key nothing in the database can be decrypted, and keychaind will not make a new one over it. Restore \(key) from a backup of the state directory. To give up this keychain and start an empty one, move \(db) (with \(db)-wal, if any) and \(record) aside.")
        }
        if hasRecord {
            throw KeychainError(.notAvailable, "\(record) says a keychain was here, but \(key) and \(db) are gone: the keychain was deleted. Restore them from a backup; or, to start a new, empty keychain, remove \(record).")
        }
        return true
    }

    /// With the device key from a credential, a device.key left in the state directory (say,
    /// during a migration to a sealed credential) must be the same key: two different keys
    /// would leave it unclear which one the keychain is sealed with.
    private func checkStateKeyMatches(_ credential: String) throws(KeychainError) {
        let plain = configuration.stateDeviceKeyPath
        guard Self.size(plain) != nil else { return }
        let stateKey = try DeviceKeyFile.loadExisting(path: plain)
        let credentialKey = try DeviceKeyFile.loadCredential(path: credential)
        guard stateKey.isEqual(toKey: credentialKey) else {
            throw KeychainError(.decode, "the device key credential \(credential) differs from \(plain): keychaind will not guess which one this keychain is sealed with. If the credential was sealed from this keychain's key, remove \(plain) (keep a backup); otherwise seal \(plain) into the credential again (docs/security.md, \"The device key as a systemd credential\").")
        }
    }

    /// The size of the file at `path` (not following a link), or nil if there is none.
    private static func size(_ path: String) -> Int? {
        var st = stat()
        return lstat(path, &st) == 0 ? Int(st.st_size) : nil
    }
}
