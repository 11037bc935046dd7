import KeychainModel

/// Exit codes (docs/cli.md). ArgumentParser itself exits 64 on usage errors.
public enum ExitStatus {
    public static let success: Int32 = 0
    public static let otherError: Int32 = 1
    public static let itemNotFound: Int32 = 2
    public static let duplicateItem: Int32 = 3
    public static let locked: Int32 = 4
    public static let accessDenied: Int32 = 5
    public static let authenticationFailed: Int32 = 6
    public static let daemonUnreachable: Int32 = 7
    /// The person at keychaind's prompt said no (errSecUserCanceled).
    public static let canceled: Int32 = 8
    public static let usage: Int32 = 64

    static func code(for status: KeychainStatus) -> Int32 {
        switch status {
        case .success: success
        case .itemNotFound: itemNotFound
        case .duplicateItem: duplicateItem
        case .interactionNotAllowed: locked
        case .missingEntitlement: accessDenied
        case .authFailed: authenticationFailed
        case .serviceNotAvailable: daemonUnreachable
        case .userCanceled: canceled
        case .param, .noSuchAttribute, .noSuchClass: usage
        default: otherError
        }
    }

    /// The commands whose errSecAuthFailed means a refused keychain passcode.
    static let passcodeCommands = ["unlock", "passcode change", "passcode remove"]

    /// The line that says what fixes `status` after `command`, naming a command that does;
    /// nil where the error's own message says it, or where no hint would be right.
    /// `retryAfter`: for a refused passcode, the seconds before one is checked again.
    static func hint(for status: KeychainStatus, command: String, retryAfter: Int64 = 0) -> String? {
        // Backup, restore and sync messages say what to do themselves; the item hints would mislead.
        if ["backup", "restore"].contains(command) || command.hasPrefix("sync ") { return nil }
        let group = command.split(separator: " ").first.map(String.init) ?? command
        switch status {
        case .itemNotFound:
            switch group {
            case "cert": return "list the certificates and their labels with `keychain cert list`"
            case "key", "csr": return "list the keys and their labels with `keychain key list`"
            default: return "check --service/--account (matching is exact), or list items with `keychain list`"
            }
        case .duplicateItem:
            switch command {
            case "add": return "an item with this identity exists; change it with `keychain update`"
            case "update": return "another item has the identity this change would give; delete it first with `keychain delete`"
            case "cert add": return "this certificate (issuer and serial number) is in the keychain already: see `keychain cert list`; to add it again, remove it first with `keychain cert delete --label LABEL`"
            case "key generate": return "choose another --label, see the keys with `keychain key list`, or pass --allow-duplicate-label if two keys should share it"
            default: return nil
            }
        case .interactionNotAllowed:
            return "the keychain is locked: run `keychain unlock`"
        case .missingEntitlement:
            return "this caller may not use that access group or call; `keychain status` lists your groups"
        case .authFailed:
            guard passcodeCommands.contains(command) else { return nil }
            return retryAfter > 0
                ? "no passcode is checked for the next \(retryAfter) s; then run `keychain \(command)` again"
                : "the passcode is not correct: run `keychain \(command)` again"
        default:
            return nil
        }
    }
}
