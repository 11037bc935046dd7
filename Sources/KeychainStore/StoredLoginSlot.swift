import KeychainCrypto
import KeychainModel
import KeychainStorage

/// What a login-slot operation starts from: the keybag snapshot and the slot as stored, taken
/// under the store owner's lock; its Argon2id then runs without the store, as a passcode
/// operation's does (KeybagSnapshot).
public struct LoginSlotSnapshot: Sendable {
    public let keybag: KeybagSnapshot
    /// The slot the operation was computed from: installed only if it is still the stored one.
    public let slot: LoginSlot?

    /// A new slot under `password`. The keychain must be unlocked and have a passcode.
    public func seal(password: SecretBytes) throws(KeychainError) -> LoginSlot {
        try ItemStore.checkPasscode(password, what: "login password")
        return try keybag.keybag.sealingLoginSlot(password, parameters: keybag.argon2, deviceKey: keybag.deviceKey)
    }

    /// The passcode classes' keys through the slot. errSecAuthFailed for a wrong password.
    public func unlock(password: SecretBytes) throws(KeychainError) -> KeybagChange {
        try ItemStore.checkPasscode(password, what: "login password")
        return try keybag.keybag.unlocking(through: try present(), password: password, deviceKey: keybag.deviceKey)
    }

    /// The slot under `new`, opened with `old`.
    public func rewrap(old: SecretBytes, new: SecretBytes) throws(KeychainError) -> LoginSlot {
        try ItemStore.checkPasscode(old, what: "old login password")
        try ItemStore.checkPasscode(new, what: "new login password")
        return try keybag.keybag.rewrappingLoginSlot(try present(), old: old, new: new, parameters: keybag.argon2,
                                                     deviceKey: keybag.deviceKey)
    }

    private func present() throws(KeychainError) -> LoginSlot {
        guard let slot else {
            throw KeychainError(.itemNotFound, "this keychain has no login slot; add one with `keychain passcode login-slot add`")
        }
        return slot
    }
}

/// The login slot of one store (docs/security.md, issue 26): the class keys sealed a second
/// time under the login password, and its own wrong-password counter. Called by the store's
/// one owner, as for every type over the store.
public struct StoredLoginSlot {
    let store: ItemStore

    private var table: LoginSlotTable { LoginSlotTable(store.database) }

    /// The stored login slot, or nil.
    public func current() throws(KeychainError) -> LoginSlot? {
        try table.record().map { (bytes) throws(KeychainError) in try LoginSlot(decoding: bytes) }
    }

    public func snapshot() throws(KeychainError) -> LoginSlotSnapshot {
        LoginSlotSnapshot(keybag: store.keybagSnapshot(), slot: try current())
    }

    /// Stores `slot` (nil: removes it), in its own transaction.
    public func save(_ slot: LoginSlot?) throws(KeychainError) {
        try store.database.transaction { () throws(KeychainError) in try table.save(slot?.encoded()) }
    }

    /// The login slot's own wrong-password counter (never the passcode's).
    public func failures() throws(KeychainError) -> (failures: Int, lastFailure: Double) {
        try table.failures()
    }

    public func saveFailures(_ failures: Int, lastFailure: Double) throws(KeychainError) {
        try store.database.transaction { () throws(KeychainError) in
            try table.saveFailures(failures, lastFailure: lastFailure)
        }
    }
}
