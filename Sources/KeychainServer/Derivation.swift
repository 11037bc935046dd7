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
    case backup(items: [AttributeDictionary], excluded: Int, password: SecretBytes, parameters: Argon2Parameters)
    case restore(file: [UInt8], password: SecretBytes, onConflict: ConflictPolicy)

    enum Output: Sendable {
        /// What a passcode call does to the keybag, for `ItemStore.apply`.
        case keybag(KeybagChange)
        case backupFile([UInt8], itemCount: Int, excluded: Int, note: String)
        case restoredItems([AttributeDictionary], BackupFile.Header)
    }

    /// The snapshot a passcode call was computed from; nil for backup and restore.
    var snapshot: KeybagSnapshot? {
        switch self {
        case .unlock(let s, _), .setPasscode(let s, _), .changePasscode(let s, _, _), .removePasscode(let s, _): s
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
        case .backup(let items, let excluded, let password, let parameters):
            let note = excluded == 0 ? "no ThisDeviceOnly items" :
                "\(excluded) ThisDeviceOnly item(s) (aku, cku, dku, akpu) left out: they never leave this device"
            let file = try BackupFile.seal(payload: BackupPayload.encode(items), itemCount: items.count, excludedCount: excluded,
                                           note: note, password: password, parameters: parameters)
            return .backupFile(file, itemCount: items.count, excluded: excluded, note: note)
        case .restore(let file, let password, _):
            let (header, payload) = try BackupFile.open(file, password: password)
            let items = try BackupPayload.decode(payload)
            guard items.count == header.itemCount else {
                throw KeychainError(.decode, "the backup holds \(items.count) items but its header says \(header.itemCount)")
            }
            return .restoredItems(items, header)
        }
    }
}

extension Derivation.Output {
    /// The keybag change of a passcode call.
    func keybagChange() throws(KeychainError) -> KeybagChange {
        guard case .keybag(let change) = self else { throw KeychainError(.internal, "a passcode call derived no keybag change") }
        return change
    }
}
