#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain passcode login-slot add|remove|status`: the second slot that lets a login unlock
/// the keychain with the login password (docs/security.md, "The login slot").
enum LoginSlotCommands {
    static let commands: [Command] = [
        Command(spec: CommandSpec(name: "passcode login-slot",
                                  summary: "add: let your login password unlock the keychain (admin; unlocked); remove; status.",
                                  options: globalOptions, flags: jsonFlag, positional: "add|remove|status")) { c in
            switch c.arguments["add|remove|status"] {
            case "add": try add(c)
            case "remove":
                try c.connection().removeLoginSlot()
                if c.json { c.printStatusJSON() } else { Output.error("login slot removed: a login no longer unlocks the keychain") }
            case "status":
                let info = try c.connection().loginSlotStatus()
                if c.json {
                    Output.line(JSON.attributes(info))
                    return
                }
                for key in ["login_slot", "failed_attempts", "retry_after"] where info[key] != nil {
                    Output.line("\(key): \(JSON.value(info[key]!).trimmingQuotes)")
                }
            default:
                throw UsageError(message: "`keychain passcode login-slot` needs one of: add, remove, status")
            }
        },
    ]

    /// Asks for the login password (twice on a terminal) and seals the slot with it.
    static func add(_ c: Context) throws {
        var password = try SecretInput.newPassword("Login password")
        defer { explicit_bzero(&password, password.count) }
        try c.connection().addLoginSlot(password: password)
        if c.json { c.printStatusJSON() } else { Output.error("login slot added: logging in with this password unlocks the keychain (with the PAM module enabled: docs/security.md)") }
    }

    /// After a passcode unlock on a terminal: a stale slot (the login password changed without
    /// it) is offered a rebuild now, when the user is there to type the new login password.
    static func offerRebuild(_ c: Context) {
        guard SecretInput.stdinIsTerminal, !c.json,
              let connection = try? c.connection(),
              case .string("stale")? = try? connection.loginSlotStatus()["login_slot"] else { return }
        Output.error("the login slot is stale: your login password changed without it, so logging in does not unlock the keychain")
        guard var password = try? SecretInput.prompt("New login password to rebuild it (Enter to skip): "), !password.isEmpty else {
            Output.error("login slot left stale; rebuild it later with `keychain passcode login-slot add`")
            return
        }
        defer { explicit_bzero(&password, password.count) }
        do {
            try connection.addLoginSlot(password: password)
            Output.error("login slot rebuilt: logging in with this password unlocks the keychain again")
        } catch {
            Output.error("the login slot was not rebuilt: \(error.message)")
        }
    }
}
