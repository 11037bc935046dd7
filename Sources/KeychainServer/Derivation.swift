import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore

extension Request {
    /// Whether the call runs Argon2id (about half a second at the default cost): the passcode
    /// calls, on the passcode, and backup and restore, on the backup password.
    var derivesKey: Bool {
        switch self {
        case .unlock, .setPasscode, .changePasscode, .removePasscode, .backupBegin, .restoreCommit: true
        case .loginSlotAdd, .loginUnlock, .loginSlotRewrap: true
        default: false
        }
    }
}

/// The Argon2id part of a call that `derivesKey`, taken out of the store's lock: the
/// RequestHandler makes it under the lock from copies of what it needs (a keybag snapshot,
/// exported items, a received file), it runs without the lock, and its output goes back to
/// the handler to be installed under the lock again.
enum Derivation: Sendable {
    case unlock(KeybagSnapshot, passcode: SecretBytes)
    case setPasscode(KeybagSnapshot, new: SecretBytes)
    case changePasscode(KeybagSnapshot, old: SecretBytes, new: SecretBytes)
    case removePasscode(KeybagSnapshot, current: SecretBytes)
    case backup(BackupContents, password: SecretBytes)
    case restore(file: [UInt8], password: SecretBytes, onConflict: ConflictPolicy)
    case loginSlotAdd(LoginSlotSnapshot, password: SecretBytes)
    case loginUnlock(LoginSlotSnapshot, password: SecretBytes)
    case loginSlotRewrap(LoginSlotSnapshot, old: SecretBytes, new: SecretBytes)

    enum Output: Sendable {
        /// What a passcode call does to the keybag, for `ItemStore.apply`.
        case keybag(KeybagChange)
        case backupFile(SealedBackup)
        case restoredItems(OpenedBackup)
        /// A login slot sealed or rewrapped, for `StoredLoginSlot.save`.
        case loginSlot(LoginSlot)
    }

    /// The snapshot a passcode call was computed from; nil for backup and restore.
    var snapshot: KeybagSnapshot? {
        switch self {
        case .unlock(let s, _), .setPasscode(let s, _), .changePasscode(let s, _, _), .removePasscode(let s, _): s
        case .loginSlotAdd(let s, _), .loginUnlock(let s, _), .loginSlotRewrap(let s, _, _): s.keybag
        case .backup, .restore: nil
        }
    }

    /// Touches nothing shared, so it needs no lock.
    func run() throws(KeychainError) -> Output {
        switch self {
        case .unlock(let snapshot, let passcode):
            return .keybag(try snapshot.unlock(passcode: passcode))
        case .setPasscode(let snapshot, let new):
            return .keybag(try snapshot.setPasscode(new))
        case .changePasscode(let snapshot, let old, let new):
            return .keybag(try snapshot.changePasscode(old: old, new: new))
        case .removePasscode(let snapshot, let current):
            return .keybag(try snapshot.removePasscode(current: current))
        case .backup(let contents, let password):
            return .backupFile(try contents.seal(password: password))
        case .restore(let file, let password, _):
            return .restoredItems(try OpenedBackup(file, password: password))
        case .loginSlotAdd(let snapshot, let password):
            return .loginSlot(try snapshot.seal(password: password))
        case .loginUnlock(let snapshot, let password):
            return .keybag(try snapshot.unlock(password: password))
        case .loginSlotRewrap(let snapshot, let old, let new):
            return .loginSlot(try snapshot.rewrap(old: old, new: new))
        }
    }
}

extension Derivation.Output {
    /// The keybag change of a passcode call.
    func keybagChange() throws(KeychainError) -> KeybagChange {
        guard case .keybag(let change) = self else { throw KeychainError(.internal, "a passcode call derived no keybag change") }
        return change
    }

    /// The login slot of a login-slot call.
    func loginSlot() throws(KeychainError) -> LoginSlot {
        guard case .loginSlot(let slot) = self else { throw KeychainError(.internal, "a login-slot call derived no slot") }
        return slot
    }
}
