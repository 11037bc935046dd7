import KeychainCrypto
import KeychainModel
import KeychainStorage

/// The keychain's core: items in SQLite, each sealed under the class key of its protection
/// domain. It holds the database, the keybag (lock state, passcode) and the codec; each
/// concern over them is a small type of its own: SecItem's calls (`items`), the keys, backup,
/// restore, the attribute index, the portal's secrets, the replica port and its outbox, the
/// login slot and the upgrade of rows hashed before schema v4.
///
/// Not thread-safe by design: one owner (the daemon's store executor, or a test) calls it.
/// Every call that writes runs in one SQLite transaction, so a crash leaves the database as it
/// was before the call or after it.
public final class ItemStore {
    /// As given, with the state directory as its real path (absolute, no link).
    public let configuration: StoreConfiguration
    let database: SQLiteDatabase
    let table: ItemTable
    let keybagTable: KeybagTable
    let lockoutTable: LockoutTable
    let deviceKey: SecureKey
    let codec: ItemCodec
    var keybag: Keybag
    /// CFAbsoluteTime now; injectable so that date rules are tested without sleeping.
    var now: () -> Double
    /// Outbox entries queued since the store opened (rolled-back ones included): the daemon
    /// compares it after a write to wake the replicator, at the cost of one compare for the
    /// writes that queue nothing.
    public internal(set) var outboxQueuedChanges: UInt64 = 0
    /// Whether writes note their Secret Service changes (someone subscribed to change
    /// notices), and the changes noted since the daemon last took them (SecretServiceChanges.swift).
    public var notesSecretServiceChanges = false
    var secretServiceChanges: [SecretServiceChange] = []
    /// Where the clean-stop record goes when the store closes; set only once a start has
    /// passed every check, so that a refused start never vouches for the database.
    private var generationRecord: GenerationRecordFile?

    /// Opens the store in `configuration.stateDirectory`, creating the directory, the device
    /// key, the database and a fresh keybag on first use (only then: a keychain missing one of
    /// them is refused, see StateInventory). With no passcode set every class key
    /// is loaded; with one set, only the Always classes are until `unlock(passcode:)`.
    public init(configuration given: StoreConfiguration, clock: @escaping () -> Double = ItemStore.absoluteTimeNow) throws(KeychainError) {
        var configuration = given
        configuration.stateDirectory = try StateDirectory.prepare(given.stateDirectory)
        self.configuration = configuration
        self.now = clock
        let firstStart = try StateInventory(configuration).isFirstStart()
        // The database file before the key: an interrupted first start then never leaves a
        // key without a database, which could as well be a keychain whose database was lost.
        try StateDirectory.createPrivateFile(configuration.databasePath)
        let deviceKey = try configuration.loadDeviceKey(firstStart: firstStart)
        let database: SQLiteDatabase
        do {
            database = try SQLiteDatabase(path: configuration.databasePath)
            try Schema.migrate(database)
        } catch where (error.underlying as? SQLiteFailure)?.isLockedByAnotherConnection == true {
            throw KeychainError(.notAvailable, "\(configuration.databasePath) is in use by another keychaind; stop it, or give this one another --state-dir",
                                underlying: error.underlying)
        }
        let table = ItemTable(database)
        table.countTransactions()
        // Lost transactions first: a database replaced by an empty one is a loss, not a
        // database that never held anything.
        let record = GenerationRecordFile(path: configuration.generationRecordPath, deviceKey: deviceKey)
        try record.read()?.check(databaseGeneration: try table.generation(), databasePath: configuration.databasePath,
                                 recordPath: record.path)
        keybag = try Self.loadKeybag(KeybagTable(database), items: table, deviceKey: deviceKey, path: configuration.databasePath)
        try record.write(GenerationRecord(state: .running, generation: try table.generation()))
        self.deviceKey = deviceKey
        self.database = database
        self.table = table
        keybagTable = KeybagTable(database)
        lockoutTable = LockoutTable(database)
        codec = ItemCodec(hasher: LookupHasher(deviceKey: deviceKey))
        try legacyNumbers.rehash()
        generationRecord = record
    }

    /// A clean stop: everything is copied into the database file (so that losing the
    /// write-ahead log from now on loses nothing), then the record says how far it got. Errors
    /// are ignored: the record then still says running, which the next start accepts as long
    /// as the database is not behind the last start.
    deinit {
        guard let generationRecord else { return }
        try? database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        guard let generation = try? table.generation() else { return }
        try? generationRecord.write(GenerationRecord(state: .clean, generation: generation))
    }

    /// Copies the write-ahead log into the database file and empties it, for a moment with no
    /// writes: until then every page a read touches is first looked up in the log's index, a
    /// search that grows with the log (up to 10,000 frames before SQLite's own checkpoint) and
    /// runs under the store's lock: at 1,000 items, four pages per get at about 2,100
    /// instructions each, 8% of keychaind's work for a get (docs/performance.md, "Issue 24's
    /// floors"). Errors are ignored: the log is then checkpointed at its size limit, as before.
    public func checkpointLog() {
        try? database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    /// The database's generation: its count of committed write transactions. The Secret
    /// Service bridge watches it to learn of changes other clients make.
    public func generation() throws(KeychainError) -> Int64 {
        try table.generation()
    }

    /// The keybag of the database. A new one (saved in its own transaction) only for a
    /// database that never held anything: no item, no transaction ever committed (a first
    /// start interrupted before its keybag was saved, or one from before schema v3 that held
    /// nothing). Any other database without its keybag is refused: new class keys would leave
    /// every item unreadable, and let adds silently replace them.
    private static func loadKeybag(_ keybags: KeybagTable, items table: ItemTable, deviceKey: SecureKey,
                                   path: String) throws(KeychainError) -> Keybag {
        if let bytes = try keybags.record() {
            return try Keybag(deviceKey: deviceKey, record: KeybagRecord(decoding: bytes))
        }
        let items = try table.count(), generation = try table.generation()
        guard items == 0, generation == 0 else {
            let held = items > 0 ? "\(items) item\(items == 1 ? "" : "s")" : "no item but \(generation) committed transactions"
            throw KeychainError(.decode, "\(path) has lost its keybag (it holds \(held)): the class keys that open its items are gone, and keychaind will not make new ones over them. Restore \(path) from a backup of the state directory.")
        }
        let created = try Keybag.create(deviceKey: deviceKey)
        try keybags.db.transaction { () throws(KeychainError) in try keybags.save(created.record.encoded()) }
        return created
    }

    // MARK: lock state and passcode

    public var hasPasscode: Bool { keybag.record.hasPasscode }

    /// Whether the class key of `pdmn` is loaded, i.e. items of that class can be used now.
    public func isAvailable(_ pdmn: Protection) -> Bool { keybag.key(for: pdmn) != nil }

    /// Loads the passcode-protected class keys. errSecAuthFailed for a wrong passcode.
    public func unlock(passcode: SecretBytes) throws(KeychainError) {
        try apply(keybagSnapshot().unlock(passcode: passcode))
    }

    /// Purges the WhenUnlocked class keys (ak, aku, akpu). Only meaningful with a passcode:
    /// without one there is nothing to unlock with, so it does nothing.
    public func lock() {
        guard hasPasscode else { return }
        keybag.purgeWhenUnlockedKeys()
    }

    /// Drops every loaded class key for which `mayHold` says no (the daemon's lock state).
    public func keepOnly(_ mayHold: (Protection) -> Bool) {
        keybag.keepOnly(mayHold)
    }

    /// Sets a passcode where none was set. The keychain must be unlocked.
    public func setPasscode(_ passcode: SecretBytes) throws(KeychainError) {
        try apply(keybagSnapshot().setPasscode(passcode))
    }

    /// Changes the passcode: the class keys are rewrapped, items are not touched.
    public func changePasscode(old: SecretBytes, new: SecretBytes) throws(KeychainError) {
        try apply(keybagSnapshot().changePasscode(old: old, new: new))
    }

    /// Removes the passcode and, in the same transaction, every WhenPasscodeSetThisDeviceOnly
    /// item (that class cannot exist without a passcode). Returns how many were deleted.
    @discardableResult
    public func removePasscode(current: SecretBytes) throws(KeychainError) -> Int {
        try apply(keybagSnapshot().removePasscode(current: current))
    }

    /// What a passcode operation starts from; its Argon2id then runs without the store.
    public func keybagSnapshot() -> KeybagSnapshot {
        KeybagSnapshot(keybag: keybag, deviceKey: deviceKey, argon2: configuration.argon2)
    }

    /// Whether no passcode change was adopted since `snapshot` was taken.
    public func isCurrent(_ snapshot: KeybagSnapshot) -> Bool { keybag.record == snapshot.keybag.record }

    /// Adopts a change computed from `keybagSnapshot()`: its record replaces the keybag row
    /// (with, for a passcode removal, every WhenPasscodeSetThisDeviceOnly item deleted) in one
    /// transaction, then its keys are loaded. errSecNotAvailable, changing nothing, if another
    /// change was adopted since that snapshot. Returns how many items were deleted.
    @discardableResult
    public func apply(_ change: KeybagChange) throws(KeychainError) -> Int {
        var next = keybag
        try next.apply(change)
        var deleted = 0
        if change.changesRecord {
            deleted = try database.transaction { () throws(KeychainError) -> Int in
                try keybagTable.save(change.record.encoded())
                // Without a passcode nothing is locked: a login slot would only be an offline
                // verifier of the login password, for nothing.
                if !change.record.hasPasscode { try LoginSlotTable(database).save(nil) }
                return change.destroys(.whenPasscodeSetThisDeviceOnly) ? try table.deleteAll(protection: .whenPasscodeSetThisDeviceOnly) : 0
            }
        }
        keybag = next
        try legacyNumbers.rehash()  // keys just loaded may open rows that wait for it
        return deleted
    }

    /// The persisted wrong-passcode counter: how many failures in a row, and when the last was
    /// (seconds since 1970).
    public func passcodeFailures() throws(KeychainError) -> (failures: Int, lastFailure: Double) {
        try lockoutTable.load()
    }

    public func savePasscodeFailures(_ failures: Int, lastFailure: Double) throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in
            try lockoutTable.save(failures: failures, lastFailure: lastFailure)
        }
    }

    /// Erases the keychain: every item, the passcode and the class keys (new ones are made),
    /// in one transaction. For the optional erase after too many wrong passcodes. The replica's
    /// state goes too: its outbox's tombstones hold blobs under the class keys being replaced,
    /// and its identity and circle keys are sealed under CK[ck].
    public func erase() throws(KeychainError) {
        let fresh = try Keybag.create(deviceKey: deviceKey)
        try database.transaction { () throws(KeychainError) in
            try table.deleteAllItems()
            try ReplicaStateTables.deleteAll(database)
            try keybagTable.save(fresh.record.encoded())
            try lockoutTable.save(failures: 0, lastFailure: 0)
            try LoginSlotTable(database).save(nil)  // it wraps the class keys being replaced
        }
        keybag = fresh
    }

    /// Longest passcode accepted; longer input is refused, never truncated.
    public static let maxPasscodeBytes = 1024

    /// A backup password follows the passcode's limits.
    public static func checkBackupPassword(_ password: SecretBytes) throws(KeychainError) {
        guard !password.isEmpty else { throw KeychainError(.param, "the backup password is empty") }
        guard password.count <= maxPasscodeBytes else {
            throw KeychainError(.param, "the backup password is longer than \(maxPasscodeBytes) bytes")
        }
    }

    static func checkPasscode(_ passcode: SecretBytes, what: String = "passcode") throws(KeychainError) {
        guard !passcode.isEmpty else { throw KeychainError(.param, "the \(what) is empty") }
        guard passcode.count <= maxPasscodeBytes else {
            throw KeychainError(.param, "the \(what) is longer than \(maxPasscodeBytes) bytes")
        }
    }

    // MARK: shared helpers

    /// The class key for `pdmn`, or errSecInteractionNotAllowed naming what to do.
    func classKey(_ pdmn: Protection) throws(KeychainError) -> SecureKey {
        if let key = keybag.key(for: pdmn) { return key }
        if pdmn == .whenPasscodeSetThisDeviceOnly && !hasPasscode {
            throw KeychainError(.notAvailable, "WhenPasscodeSetThisDeviceOnly items need a passcode: set one first")
        }
        throw KeychainError(.interactionNotAllowed, "the keychain is locked and \(pdmn.name) items are unavailable until it is unlocked")
    }

    /// Opens a row. Locked class: errSecInteractionNotAllowed. Altered row: errSecDecode.
    func open(_ row: ItemRow, withAttributes: Bool = true) throws(KeychainError) -> StoredItem {
        guard let pdmn = row.protection else {
            throw KeychainError(.decode, "item has an unknown protection class: the row was altered")
        }
        return try codec.open(row, classKey: try classKey(pdmn), withAttributes: withAttributes)
    }

    /// Runs several calls in one transaction, committed (and fsynced) once: the daemon's group
    /// commit. Each call inside still succeeds or fails on its own (a savepoint each); if the
    /// final commit fails, this throws and none of them took effect.
    public func inOneTransaction(_ body: () -> Void) throws(KeychainError) {
        try database.transaction { () throws(KeychainError) in body() }
    }

    /// Number of item rows, for tests and status.
    public func itemCount() throws(KeychainError) -> Int { try table.count() }

    // MARK: the parts over this store, each for one concern

    /// SecItem's calls: add, copyMatching, update and delete.
    public var items: SecItems { SecItems(store: self) }

    /// Keys used inside the daemon: generation and the key calls.
    public var keys: KeyStore { KeyStore(store: self) }

    /// The rows with their class keys, the part of a read that needs exclusive access.
    var rows: SealedRows { SealedRows(store: self) }

    /// The outer parts of a split read, to be used from any thread.
    public var splitReader: SplitReader { SplitReader(codec: codec) }

    /// What a backup takes out of this store.
    public var backupExporter: BackupExporter { BackupExporter(store: self) }

    /// What a restore puts in.
    public var restorer: Restorer { Restorer(store: self) }

    /// The Secret Service bridge's items, by their D-Bus attributes.
    public var attributeIndex: AttributeIndex { AttributeIndex(store: self) }

    /// The desktop portal's per-app secrets.
    public var portalSecrets: PortalSecrets { PortalSecrets(store: self) }

    /// The replica outbox, which every local write of a synchronizable item fills.
    var outbox: Outbox { Outbox(store: self) }

    /// The upgrade of rows that hashed a number as its text (before schema v4).
    var legacyNumbers: LegacyNumbers { LegacyNumbers(store: self) }

    /// The login slot: the class keys under the login password, and its delays.
    public var loginSlot: StoredLoginSlot { StoredLoginSlot(store: self) }
}
