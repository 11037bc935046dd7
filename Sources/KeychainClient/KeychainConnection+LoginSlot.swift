import KeychainModel
import KeychainProtocol

/// The login slot (docs/security.md, "The login slot"): a second wrapping of the passcode
/// classes under the user's login password, so that a login unlocks the keychain.
extension KeychainConnection {
    /// Wraps the passcode classes under `password`, replacing a slot there (admin; unlocked,
    /// with a passcode).
    public func addLoginSlot(password: [UInt8]) throws(KeychainError) {
        try perform(Calls.done(.loginSlotAdd(password: SecretBytes(password))))
    }

    public func removeLoginSlot() throws(KeychainError) { try perform(Calls.done(.loginSlotRemove)) }

    /// `login_slot` (none, current, stale), and the slot's own `failed_attempts` and `retry_after`.
    public func loginSlotStatus() throws(KeychainError) -> AttributeDictionary {
        try perform(Calls.attributes(.loginSlotStatus, "login slot status"))
    }

    /// Unlocks through the login slot. A wrong password counts on the slot's counter only.
    public func loginUnlock(password: [UInt8]) throws(KeychainError) {
        try perform(Calls.done(.loginUnlock(password: SecretBytes(password))))
    }

    /// Follows a change of the login password; an empty `old` (unknown: a reset by root) marks
    /// the slot stale.
    /// The daemon's metrics, Prometheus's text exposition (admin).
    public func metrics() throws(KeychainError) -> String {
        String(decoding: try perform(Calls.data(.metrics, "metrics")), as: UTF8.self)
    }

    public func rewrapLoginSlot(old: [UInt8], new: [UInt8]) throws(KeychainError) {
        try perform(Calls.done(.loginSlotRewrap(old: SecretBytes(old), new: SecretBytes(new))))
    }
}
