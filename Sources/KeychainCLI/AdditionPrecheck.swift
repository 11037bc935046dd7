import KeychainClient
import KeychainModel

/// What `add` asks keychaind before it reads the secret: without it, a locked class or a group
/// outside the caller's rights is found only after the secret was typed (twice) or piped in.
/// keychaind still decides on the add itself; this only fails early, with the status the add
/// would have had.
enum AdditionPrecheck {
    static func check(_ item: AttributeDictionary, connection: KeychainConnection) throws(KeychainError) {
        let info = try connection.status()
        let groups = ListCommand.text(info["groups"]).split(separator: ",").map(String.init)
        if groups.isEmpty {
            // An admin without an application (root at another user's daemon) sees its status
            // but no items: keychaind's refusal names the config file that would admit it.
            do {
                _ = try connection.copyMatching(["class": item["class"] ?? .string("genp"), "m_Limit": .string("m_LimitOne")])
            } catch where error.status == .missingEntitlement {
                throw error
            } catch {}
        }
        if case .string(let group)? = item["agrp"], !groups.isEmpty, !groups.contains(group) {
            throw KeychainError(.missingEntitlement, "this caller may not add items to access group \(group); its groups are \(groups.joined(separator: ", ")); nothing was read or stored")
        }
        var protection = Protection.whenUnlocked
        if let given = AccessControl(attributes: item)?.protection { protection = given }
        guard isAvailable(protection, state: ListCommand.text(info["state"]), inGracePeriod: info["purge_in"] != nil) else {
            throw KeychainError(.interactionNotAllowed, "the keychain is locked: a \(protection.name) item cannot be added until it is unlocked; nothing was read or stored")
        }
        // What it asks for is the keychain passcode: without one it could never be read.
        if AccessControl(attributes: item)?.asksFirst == true, info["passcode"] == .bool(false) {
            throw KeychainError(.param, "--require asks for the keychain passcode at keychaind's prompt, and this keychain has none: set one with `keychain passcode set` first; nothing was read or stored")
        }
    }

    /// Whether keychaind holds the class key of `protection` in `state` (docs/protocol.md,
    /// "Lock state"): the Always classes always; the AfterFirstUnlock classes once unlocked
    /// since keychaind started; the WhenUnlocked classes while unlocked or in the grace period.
    static func isAvailable(_ protection: Protection, state: String, inGracePeriod: Bool) -> Bool {
        if state == "unlocked" { return true }
        switch protection {
        case .always, .alwaysThisDeviceOnly: return true
        case .afterFirstUnlock, .afterFirstUnlockThisDeviceOnly: return state == "locked"
        case .whenUnlocked, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly: return inGracePeriod
        }
    }
}
