import KeychainClient
import KeychainModel

/// `add --require`: what the person at the machine must do before an item's secret is read
/// (kSecAttrAccessControl's constraints, docs/security.md "Items that ask first"). A comma
/// list asks for each of them; keychaind refuses the combinations Apple refuses.
enum Requirement {
    static let table: [(name: String, flags: AccessControl.Flags)] = [
        ("presence", .userPresence),
        ("passcode", .devicePasscode),
        ("app-password", .applicationPassword),
    ]
    static var names: [String] { table.map(\.name) }

    static let help = "The item asks first: presence or passcode (both: the keychain passcode typed at keychaind's prompt), app-password (the secret is sealed under a password typed at the terminal or given with --app-password-stdin, needed for every read); a comma list asks for each."
    static let keyHelp = "Each use of the key asks first: presence or passcode (each signature, decryption and agreement asks for the keychain passcode at keychaind's prompt), app-password (the private key is sealed under a password typed at the terminal or given with --app-password-stdin, needed for each use); a comma list asks for each."

    /// The flags `text` names ("presence", "presence,app-password").
    static func flags(_ text: String) throws(UsageError) -> AccessControl.Flags {
        var flags: AccessControl.Flags = []
        for word in text.split(separator: ",", omittingEmptySubsequences: false).map({ String($0) }) {
            guard let entry = table.first(where: { $0.name == word }) else {
                throw UsageError(message: "--require takes \(names.joined(separator: ", ")) or a comma list of them, not '\(word)'")
            }
            flags.insert(entry.flags)
        }
        return flags
    }

    /// The access control an add sends: --accessible's class (or when-unlocked) with the
    /// constraints. Checked here with keychaind's rules, so a refused combination costs no
    /// typed secret.
    static func accessControl(_ text: String, protection pdmn: AttributeValue?, synchronizable: Bool) throws(UsageError) -> AccessControl {
        guard !synchronizable else {
            throw UsageError(message: "--require and --synchronizable cannot go together: an item that asks first never leaves this device through sync")
        }
        return try accessControl(text, protection: pdmn?.stringValue.flatMap(Protection.init(rawValue:)) ?? .whenUnlocked)
    }

    /// The access control of `--require text` over `protection`, checked with keychaind's rules.
    static func accessControl(_ text: String, protection: Protection) throws(UsageError) -> AccessControl {
        do {
            return try AccessControl(protection: protection, flags: flags(text))
        } catch let error as KeychainError {
            throw UsageError(message: "--require \(text): \(error.message)")
        } catch let error as UsageError {
            throw error
        } catch {
            throw UsageError(message: "\(error)")
        }
    }

    /// How `list` and `get --json` readers see the constraint: "presence", "passcode,app-password".
    static func describe(_ control: AccessControl) -> String {
        let named = table.filter { control.constraints.contains($0.flags) }.map(\.name)
        let rest = control.constraints.subtracting(AccessControl.Flags(table.map(\.flags)))
        return (named + (rest.isEmpty ? [] : [String(rest.rawValue)])).joined(separator: ",")
    }
}

/// A read that needed the person and did not get them: the person said no (errSecUserCanceled),
/// or nobody could be asked (errSecInteractionNotAllowed while the keychain is unlocked).
/// Context.run prints its message and hint instead of the lock-state hint.
struct PromptOutcome: Error {
    let error: KeychainError
    let hint: String?

    /// What `get` says for `error`, when it came from keychaind's prompt; nil otherwise.
    static func from(_ error: KeychainError, noPrompt: Bool, connection: KeychainConnection) -> PromptOutcome? {
        switch error.status {
        case .userCanceled:
            return PromptOutcome(error: KeychainError(.userCanceled, "the person at keychaind's prompt said no: the secret was not read"),
                                 hint: "to allow it, run the command again and type the keychain passcode at the prompt")
        case .interactionNotAllowed:
            // A locked keychain is the other cause of this code: that one keeps its unlock hint.
            guard case .string("unlocked")? = try? connection.status()["state"] else { return nil }
            if noPrompt {
                return PromptOutcome(error: KeychainError(.interactionNotAllowed, "the item asks the person first, and --no-prompt forbids asking: the secret was not read"),
                                     hint: "run it without --no-prompt where someone can answer keychaind's prompt")
            }
            return PromptOutcome(error: KeychainError(.interactionNotAllowed, "the item asks the person first, and nobody can be asked: \(error.message)"),
                                 hint: "keychaind asks on the display or terminal that [prompt] in keychaind.toml names, for the keychain passcode (`keychain passcode set`)")
        default:
            return nil
        }
    }
}
