#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// A command: its spec and what it does.
struct Command: Sendable {
    let spec: CommandSpec
    let body: @Sendable (Context) throws -> Void
}

let globalOptions: [(name: String, help: String)] = [
    ("socket", "keychaind's socket (default: $KEYCHAIN_SOCKET, else the per-user default)."),
    ("trust-uid", "Also talk to a keychaind running as this uid or user (default: $KEYCHAIN_TRUST_UID); root's and your own are always trusted."),
]
let jsonFlag: [(name: String, help: String)] = [("json", "Machine-readable JSON output.")]
private let itemOptions: [(name: String, help: String)] = [
    ("class", "generic-password or internet-password (default: generic-password; list and delete: both)."),
    ("service", "Service (generic passwords)."),
    ("account", "Account."),
    ("server", "Server (internet passwords)."),
    ("protocol", "Protocol (internet passwords): https, http, ftp, ssh, smtp, imap... or a 4-character code."),
    ("port", "Port (internet passwords)."),
    ("path", "Path (internet passwords)."),
    ("access-group", "Access group (default: the caller's first group)."),
]
/// `--synchronizable` is a flag: on add it makes the item synced to the sync circle; on the
/// other commands it narrows them to synced items (without it they see both kinds).
let synchronizableFlag: [(name: String, help: String)] = [
    ("synchronizable", "add: sync the item to this keychain's sync circle (not with a -this-device-only class). get, update, delete, list: only synced items (default: synced and local alike)."),
]
/// An empty secret is mostly a mistake (an unset variable piped in, Enter at both prompts).
private let allowEmptyFlag: [(name: String, help: String)] = [
    ("allow-empty", "Store an empty secret (refused without it: an unset variable or two Enters are mistakes more often than not)."),
]
private let attributeOptions: [(name: String, help: String)] = [
    ("accessible", "when-unlocked (default), after-first-unlock, always, their -this-device-only forms, when-passcode-set-this-device-only."),
    ("label", "Label."),
    ("comment", "Comment."),
    ("expires", ExpiryTime.help),
]

/// Every command, in `keychain --help`'s order, built on first use by help, the completion
/// scripts and the two-word commands of the other files.
let commands: [Command] = Command.core + [InitCommand.command] + LoginSlotCommands.commands + KeyCommands.commands + KeyEncryptionCommands.commands + CertificateCommands.commands + SyncCommands.commands + CredentialCommands.commands

extension Command {
    /// The command `name` names ("get", "key sign"). Those of this file are built alone,
    /// without the table: building every command's spec and closure was 23% of a `keychain
    /// get` (docs/performance.md, "Issue 24's floors"). The others come from the table.
    static func named(_ name: String) -> Command? {
        switch name {
        case "add": add
        case "get": get
        case "update": update
        case "delete": delete
        case "list": list
        case "status": status
        case "metrics": metrics
        case "lock": lock
        case "unlock": unlock
        case "backup": backup
        case "restore": restore
        case "ssh-agent": sshAgent
        case "passcode set": passcodeSet
        case "passcode change": passcodeChange
        case "passcode remove": passcodeRemove
        case "init": InitCommand.command
        default: commands.first { $0.spec.name == name }
        }
    }

    /// The commands of this file, in the table's order.
    static var core: [Command] { [add, get, update, delete, list, status, metrics, lock, unlock, backup, restore, sshAgent, passcodeSet, passcodeChange, passcodeRemove] }

    static var add: Command { Command(spec: CommandSpec(name: "add", summary: "Add an item; the secret comes from standard input.",
                              options: globalOptions + itemOptions + attributeOptions + [("require", Requirement.help)],
                              flags: jsonFlag + synchronizableFlag + allowEmptyFlag + ApplicationPasswordInput.flags)) { c in
        var dict = try c.itemQuery(adding: true).merging(try c.itemAttributes()) { $1 }
        var sealed = false
        if let require = c.arguments["require"] {
            // The protection class travels inside accc: pdmn beside constraints is refused.
            let control = try Requirement.accessControl(require, protection: dict.removeValue(forKey: "pdmn"),
                                                        synchronizable: c.arguments.has("synchronizable"))
            dict["accc"] = control.attributeValue
            sealed = AccessControl.needsApplicationPassword(control.flags)
        }
        if c.arguments.has(ApplicationPasswordInput.stdinFlag) && !sealed {
            throw UsageError(message: "--app-password-stdin is for an item added with --require app-password")
        }
        let connection = try c.connection()
        try AdditionPrecheck.check(dict, connection: connection)
        var password = sealed ? try ApplicationPasswordInput.forAdd(c.arguments) : nil
        defer { if password != nil { explicit_bzero(&password!, password!.count) } }
        var secret = try SecretInput.secret()
        defer { explicit_bzero(&secret, secret.count) }
        try SecretInput.refuseEmpty(secret, allowed: c.arguments.has("allow-empty"))
        dict["v_Data"] = .data(secret)
        try ApplicationPasswordInput.withContext(password, on: connection) { (context) throws(KeychainError) in
            _ = try connection.add(context?.applied(to: dict) ?? dict)
        }
        c.printStatusJSON()
    } }

    static var get: Command { Command(spec: CommandSpec(name: "get", summary: "Write an item's secret to standard output, exactly (--json: attributes and the secret in base64).",
                              options: globalOptions + itemOptions + [("reason", "For an item that asks first: the reason keychaind's prompt shows (kSecUseOperationPrompt).")],
                              flags: jsonFlag + synchronizableFlag + [("no-prompt", "Never ask the person: an item that asks first fails (exit 4) instead (kSecUseAuthenticationUIFail).")]
                                + ApplicationPasswordInput.flags)) { c in
        try ItemSelection.require(c.arguments)
        var query = try c.itemQuery()
        query["r_Data"] = .bool(true)
        if c.json { query["r_Attributes"] = .bool(true) }
        if c.arguments.has("no-prompt") { query["u_AuthUI"] = .string("u_AuthUIF") }
        if let reason = c.arguments["reason"] { query["u_OpPrompt"] = .string(reason) }
        let connection = try c.connection()
        var password = try ApplicationPasswordInput.fromStdin(c.arguments)
        defer { if password != nil { explicit_bzero(&password!, password!.count) } }
        let answer: QueryResult
        do {
            answer = try ApplicationPasswordInput.run(c.arguments, query: query, on: connection, mayAsk: !c.arguments.has("no-prompt"),
                                                      given: password) { (context) throws(KeychainError) -> QueryResult in
                guard let context else { return try connection.copyMatching(query) }
                return try connection.copyMatching(query, context: context)
            }
        } catch let error as KeychainError {
            if let outcome = PromptOutcome.from(error, noPrompt: c.arguments.has("no-prompt"), connection: connection) { throw outcome }
            throw error
        }
        switch answer {
        case .single(.data(let secret)):
            Output.stdout(secret)  // SecretBytes: wiped when released
        case .single(.attributes(let attrs)):
            Output.line(JSON.attributes(attrs))
        default:
            throw KeychainError(.decode, "unexpected answer from keychaind")
        }
    } }

    static var update: Command { Command(spec: CommandSpec(name: "update", summary: "Change matching items: a new secret from standard input, and/or attributes.",
                              options: globalOptions + itemOptions + attributeOptions + [("new-account", "Rename: the new account.")],
                              flags: jsonFlag + synchronizableFlag + allowEmptyFlag + [("keep-secret", "Change only the attributes given; keep the secret (standard input is not read).")]
                                + ApplicationPasswordInput.flags)) { c in
        try ItemSelection.require(c.arguments)
        let query = try c.itemQuery()
        var changes = try c.itemAttributes()
        if let v = c.arguments["new-account"] { changes["acct"] = .string(v) }
        // First: for an item sealed under one, the password's line comes before the secret.
        var password = try ApplicationPasswordInput.fromStdin(c.arguments)
        defer { if password != nil { explicit_bzero(&password!, password!.count) } }
        var secret: [UInt8] = []
        defer { explicit_bzero(&secret, secret.count) }
        if !c.arguments.has("keep-secret") {
            secret = try SecretInput.secret()
            try SecretInput.refuseEmpty(secret, allowed: c.arguments.has("allow-empty"))
            changes["v_Data"] = .data(secret)
        }
        guard !changes.isEmpty else {
            throw UsageError(message: "nothing to change: give attribute options with --keep-secret")
        }
        let connection = try c.connection()
        do {
            try ApplicationPasswordInput.run(c.arguments, query: query, on: connection, given: password) { (context) throws(KeychainError) in
                try connection.update(context?.applied(to: query) ?? query, changes)
            }
        } catch let error as KeychainError {
            // Unlocked, this code is an item that asks first refusing the change: not a lock.
            if error.status == .interactionNotAllowed, case .string("unlocked")? = try? connection.status()["state"] {
                throw PromptOutcome(error: error, hint: "`keychain list` shows which items ask first; changing one asks at keychaind's prompt, which needs a display or terminal in [prompt] of keychaind.toml")
            }
            throw error
        }
        c.printStatusJSON()
    } }

    static var delete: Command { Command(spec: CommandSpec(name: "delete", summary: "Delete the matching items (every item only with --all) and say how many.",
                              options: globalOptions + itemOptions,
                              flags: jsonFlag + synchronizableFlag + [("all", "Delete every item (of --class, --access-group, --synchronizable if given); without a class both password classes.")])) { c in
        try DeleteCommand.run(c)
    } }

    static var list: Command { Command(spec: CommandSpec(name: "list", summary: "List matching passwords' attributes, never secrets (without --class: generic and internet passwords).",
                              options: globalOptions + itemOptions, flags: jsonFlag + synchronizableFlag)) { c in
        try ListCommand.run(c)
    } }

    static var status: Command { Command(spec: CommandSpec(name: "status", summary: "Show keychaind's version, lock state and passcode state.",
                              options: globalOptions, flags: jsonFlag)) { c in
        let info = try c.connection().status()
        if c.json {
            Output.line(JSON.attributes(info))
            return
        }
        // The lock state first, as a reader looks for it; then the rest in docs/cli.md's order.
        let order = ["state", "since", "purge_in", "auto_lock_in", "passcode", "failed_attempts", "retry_after", "login_slot", "login_slot_retry_after", "groups", "version"]
        for key in info.keys.sorted(by: { (order.firstIndex(of: $0) ?? order.count, $0) < (order.firstIndex(of: $1) ?? order.count, $1) }) {
            Output.line("\(key): \(JSON.value(info[key]!).trimmingQuotes)")
        }
    } }

    static var metrics: Command { Command(spec: CommandSpec(name: "metrics", summary: "Print keychaind's metrics in Prometheus's text format (admin).",
                              options: globalOptions, flags: [])) { c in
        Output.text(try c.connection().metrics())
    } }

    static var lock: Command { Command(spec: CommandSpec(name: "lock", summary: "Lock the keychain (admin); says how long when-unlocked items stay readable (the grace period).",
                              options: globalOptions, flags: jsonFlag)) { c in
        let connection = try c.connection()
        try connection.lock()
        // The grace period keeps when-unlocked items readable after the lock (docs/cli.md):
        // say so, or a `get` that still answers looks like a lock that failed.
        let purgeIn: Int64? = if case .int(let seconds)? = try? connection.status()["purge_in"] { seconds } else { nil }
        if c.json {
            Output.line(JSON.object([("status", "0")] + (purgeIn.map { [("purge_in", String($0))] } ?? [])))
        } else if let purgeIn, purgeIn > 0 {
            Output.error("locked: when-unlocked items stay readable for \(purgeIn) s more (the grace period, lock_grace_seconds); then only `keychain unlock` opens them")
        } else {
            Output.error("locked: when-unlocked items are unreadable until `keychain unlock`")
        }
    } }

    static var unlock: Command { Command(spec: CommandSpec(name: "unlock", summary: "Unlock (admin): passcode from a no-echo prompt or one line of standard input.",
                              options: globalOptions,
                              flags: jsonFlag + [("login", "Unlock through the login slot with the login password instead (what the PAM module does)."),
                                                 ("prompt", "Let keychaind ask for the passcode on its own prompt ([prompt] in keychaind.toml); any app may ask, not only admins.")])) { c in
        if c.arguments.has("prompt") {
            // The person may take up to keychaind's 120 s at its prompt: wait longer than that.
            let connection = try c.connection()
            try KeychainConnection(socketPath: connection.socketPath, timeoutMs: 180_000, trust: connection.trust).unlockPrompt()
            c.printStatusJSON()
            return
        }
        if c.arguments.has("login") {
            var password = try SecretInput.passcode("Login password")
            defer { explicit_bzero(&password, password.count) }
            try c.connection().loginUnlock(password: password)
            c.printStatusJSON()
            return
        }
        var passcode = try SecretInput.passcode("Passcode")
        defer { explicit_bzero(&passcode, passcode.count) }
        try c.connection().unlock(passcode: passcode)
        c.printStatusJSON()
        LoginSlotCommands.offerRebuild(c)
    } }

    static var backup: Command { Command(spec: CommandSpec(name: "backup", summary: "Write an encrypted backup of every item that may leave this device (admin; unlocked).",
                              options: globalOptions + [("out", "The backup file to write (0600, atomically).")],
                              flags: jsonFlag)) { c in
        try BackupCommands.backup(c)
    } }

    static var restore: Command { Command(spec: CommandSpec(name: "restore", summary: "Restore a backup file here, in one transaction (admin; unlocked).",
                              options: globalOptions + [("on-conflict", "skip, replace or fail (default: fail, before writing anything).")],
                              flags: jsonFlag, positional: "FILE")) { c in
        try BackupCommands.restore(c)
    } }

    static var sshAgent: Command { Command(spec: CommandSpec(name: "ssh-agent", summary: "Serve the SSH agent protocol with the keychain's SSH keys, which never leave keychaind.",
                              options: globalOptions + [("listen", "The agent's socket path; its directory is created 0700 (default: a new directory under $TMPDIR).")],
                              flags: [("foreground", "Stay in the foreground and log to standard error (as ssh-agent -D).")])) { c in
        try SSHAgentCommand.run(c)
    } }

    static var passcodeSet: Command { Command(spec: CommandSpec(name: "passcode set", summary: "Set a passcode where there is none (admin).",
                              options: globalOptions, flags: jsonFlag)) { c in
        var new = try SecretInput.newPassword("New passcode")
        defer { explicit_bzero(&new, new.count) }
        try c.connection().setPasscode(new)
        c.printStatusJSON()
    } }

    static var passcodeChange: Command { Command(spec: CommandSpec(name: "passcode change", summary: "Change the passcode (admin; reads the old, then the new).",
                              options: globalOptions, flags: jsonFlag)) { c in
        var old = try SecretInput.passcode("Current passcode")
        var new = try SecretInput.newPassword("New passcode")
        defer { explicit_bzero(&old, old.count); explicit_bzero(&new, new.count) }
        try c.connection().changePasscode(old: old, new: new)
        c.printStatusJSON()
    } }

    static var passcodeRemove: Command { Command(spec: CommandSpec(name: "passcode remove", summary: "Remove the passcode (admin); deletes when-passcode-set-this-device-only items.",
                              options: globalOptions, flags: jsonFlag)) { c in
        var current = try SecretInput.passcode("Current passcode")
        defer { explicit_bzero(&current, current.count) }
        try c.connection().removePasscode(current: current)
        c.printStatusJSON()
    } }
}

extension String {
    var trimmingQuotes: String {
        hasPrefix("\"") && hasSuffix("\"") && count >= 2 ? String(dropFirst().dropLast()) : self
    }
}
