import KeychainCrypto
import KeychainModel

/// A copy of what a passcode operation needs (the keybag, a value; the device key; the cost
/// for a new passcode), taken under the store owner's lock. Its operations run Argon2id
/// without touching the store, so the owner runs them outside that lock and hands the
/// result to `ItemStore.apply` under it.
public struct KeybagSnapshot: Sendable {
    let keybag: Keybag
    let deviceKey: SecureKey
    let argon2: Argon2Parameters

    public var hasPasscode: Bool { keybag.record.hasPasscode }

    /// The passcode classes' keys. errSecAuthFailed for a wrong passcode.
    public func unlock(passcode: SecretBytes) throws(KeychainError) -> KeybagChange {
        try ItemStore.checkPasscode(passcode)
        return try keybag.unlocking(passcode: passcode, deviceKey: deviceKey)
    }

    /// A passcode where none was set. The keychain must be unlocked.
    public func setPasscode(_ passcode: SecretBytes) throws(KeychainError) -> KeybagChange {
        try ItemStore.checkPasscode(passcode)
        return try keybag.settingPasscode(passcode, parameters: argon2, deviceKey: deviceKey)
    }

    /// The class keys rewrapped under `new`; nothing is loaded.
    public func changePasscode(old: SecretBytes, new: SecretBytes) throws(KeychainError) -> KeybagChange {
        try ItemStore.checkPasscode(old)
        try ItemStore.checkPasscode(new)
        return try keybag.changingPasscode(old: old, new: new, parameters: argon2, deviceKey: deviceKey)
    }

    /// No passcode; applying it deletes every WhenPasscodeSetThisDeviceOnly item.
    public func removePasscode(current: SecretBytes) throws(KeychainError) -> KeybagChange {
        try ItemStore.checkPasscode(current)
        return try keybag.removingPasscode(current: current, deviceKey: deviceKey)
    }
}
