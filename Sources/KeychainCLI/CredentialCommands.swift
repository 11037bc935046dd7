#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel
import KeychainProtocol

/// `keychain credential add|check UNIT ID`: items that systemd's LoadCredential= reads from
/// keychaind's credential socket (docs/credentials.md).
enum CredentialCommands {
    private static let options: [(name: String, help: String)] = [
        ("credential-socket", "The credential socket to name in the unit's line (default: /run/keychaind/credentials.sock for the system keychaind, else keychaind-credentials.sock beside --socket)."),
    ]
    private static let userFlag: [(name: String, help: String)] = [
        ("user", "A unit of your own user manager (systemctl --user), not a system unit."),
    ]

    static let commands: [Command] = [
        Command(spec: CommandSpec(name: "credential add", summary: "Store the secret on standard input as credential ID of UNIT, and print the unit's lines.",
                                  options: globalOptions + options + [
                                      ("access-group", "Access group (default: your first; the unit's [[app]] must hold it)."),
                                      ("accessible", "when-unlocked (default), after-first-unlock (for units that start at boot, before anyone unlocks), always, their -this-device-only forms."),
                                  ],
                                  flags: userFlag,
                                  positional: "UNIT ID")) { c in
            let (unit, id) = try target(c)
            var dict: AttributeDictionary = ["class": .string("genp"), "svce": .string("systemd-credential:" + unit),
                                             "acct": .string(id), "labl": .string("LoadCredential=\(id) of \(unit)")]
            if let group = c.arguments["access-group"] { dict["agrp"] = .string(group) }
            if let accessible = c.arguments["accessible"] {
                guard let pdmn = Accessible.pdmn(named: accessible) else { throw UsageError(message: "unknown --accessible \(accessible)") }
                dict["pdmn"] = .string(pdmn)
            }
            var secret = try SecretInput.secret()
            defer { explicit_bzero(&secret, secret.count) }
            try SecretInput.refuseEmpty(secret, allowed: false)
            dict["v_Data"] = .data(secret)
            try c.connection().add(dict)
            // The system socket is socket-activated: After= makes a unit that starts at boot
            // wait until it listens. A user daemon's socket is its config's (credential_socket).
            let path = socketPath(c)
            if !c.arguments.has("user") && path == systemSocket {
                Output.line("[Unit]")
                Output.line("After=keychaind-credentials.socket")
                Output.line("Wants=keychaind-credentials.socket")
            }
            Output.line("[Service]")
            Output.line("LoadCredential=\(id):\(path)")
        },
        Command(spec: CommandSpec(name: "credential check", summary: "Say whether UNIT would get credential ID, without the secret (admin).",
                                  options: globalOptions, flags: jsonFlag + userFlag, positional: "UNIT ID")) { c in
            let (unit, id) = try target(c)
            let found = try c.connection().credentialLookup(unit: unit, id: id, userUID: c.arguments.has("user") ? getuid() : nil)
            if c.json {
                Output.line(JSON.attributes(found))
            } else {
                Output.line("\(unit) gets credential \(id): \(JSON.value(found["size"] ?? .int(0))) bytes from the item in access group \(JSON.value(found["agrp"] ?? .string("?")).trimmingQuotes)")
            }
        },
    ]

    private static let systemSocket = "/run/keychaind/credentials.sock"

    private static func target(_ c: Context) throws -> (unit: String, id: String) {
        guard let both = c.arguments["UNIT ID"] else { throw UsageError(message: "give the unit and the credential id, e.g. web.service token") }
        let parts = both.split(separator: " ", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw UsageError(message: "give the credential id after the unit, e.g. web.service token") }
        return (parts[0], parts[1])
    }

    /// Where the unit's manager connects: the system keychaind's packaged socket, else the
    /// one beside the daemon's socket (credential_socket in its keychaind.toml).
    private static func socketPath(_ c: Context) -> String {
        if let given = c.arguments["credential-socket"] { return given }
        let main = DefaultPaths.clientSocketPath(c.socket)
        if main == "/run/keychaind/keychaind.sock" { return systemSocket }
        let directory = main.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        return directory + "/keychaind-credentials.sock"
    }
}
