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
        case .param, .noSuchAttribute, .noSuchClass: usage
        default: otherError
        }
    }

    static func hint(for status: KeychainStatus) -> String? {
        switch status {
        case .itemNotFound: "check --service/--account (matching is exact), or list items with `keychain list`"
        case .duplicateItem: "an item with this identity exists; change it with `keychain update`"
        case .interactionNotAllowed: "the keychain is locked: run `keychain unlock`"
        case .missingEntitlement: "this caller may not use that access group or call"
        case .authFailed: "the passcode is not correct"
        default: nil
        }
    }
}
