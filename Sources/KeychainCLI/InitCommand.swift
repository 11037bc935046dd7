#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain init`: a user's first run in one command (issue 26). Each step looks first and
/// acts only when needed, so running it again changes nothing and says so.
enum InitCommand {
    static let command = Command(spec: CommandSpec(
        name: "init",
        summary: "First run: start keychaind (the user unit where systemd runs one), set how it unlocks (your login password or a passcode); --secret-service, --pam.",
        options: globalOptions + [
            ("state-dir", "keychaind's state directory when init starts it by hand (default: its own default)."),
            ("unlock-with", "login (your login password: a passcode and a login slot with it), passcode (a separate one), or none (never locked). Default: asked on a terminal, else login."),
        ],
        flags: [
            ("secret-service", "Also enable the Secret Service bridge for this user (keychain-secret-service --enable)."),
            ("pam", "Also enable the PAM profile, so a login unlocks the keychain (root only; pam-auth-update --enable keychaind)."),
        ])) { c in try run(c) }

    static func run(_ c: Context) throws {
        if c.arguments.has("pam") { try enablePAM() }
        try startDaemon(c)
        try chooseUnlock(c)
        if c.arguments.has("secret-service") { try enableSecretService(c) }
    }

    // MARK: the daemon

    private static func startDaemon(_ c: Context) throws {
        let socket = try c.connection().socketPath
        if (try? c.connection().status()) != nil {
            Output.line("keychaind: already serving \(socket)")
            return
        }
        // The user unit when the user has a systemd manager and nothing overrides the defaults:
        // keychaind then starts on first use and at every login.
        if getuid() != 0, c.socket == nil, env("KEYCHAIN_SOCKET") == nil, c.arguments["state-dir"] == nil,
           run("systemctl", ["--user", "enable", "--now", "keychaind.socket"], quiet: true) == 0 {
            Output.line("keychaind: enabled the user unit keychaind.socket (it starts on first use and after each login)")
            return
        }
        // keychaind's own default when none was named: it makes the /tmp fallback's directory.
        var arguments = ["--background"]
        if c.socket != nil || env("KEYCHAIN_SOCKET") != nil { arguments += ["--socket", socket] }
        if let state = c.arguments["state-dir"] { arguments += ["--state-dir", state] }
        guard run("keychaind", arguments, quiet: true) == 0 else {
            throw KeychainError(.serviceNotAvailable, "could not start keychaind on \(socket): run `keychaind --background --socket \(socket)` to see why")
        }
        Output.line("keychaind: started on \(socket), not under systemd: after a reboot start it again with `keychain init`, or enable the user unit (`systemctl --user enable --now keychaind.socket`)")
    }

    // MARK: unlocking

    private enum Unlock: String { case login, passcode, none }

    private static func chooseUnlock(_ c: Context) throws {
        let connection = try c.connection()
        let status = try connection.status()
        if case .bool(true)? = status["passcode"] {
            let slot = try? connection.loginSlotStatus()["login_slot"]
            let word: String = if case .string(let s)? = slot { s } else { "none" }
            Output.line("passcode: already set; login slot: \(word)\(word == "none" ? " (add one with `keychain passcode login-slot add`)" : "")")
            return
        }
        let choice = try unlockChoice(c)
        switch choice {
        case .none:
            Output.line("passcode: none: the keychain is never locked, and when-unlocked items are as open as always ones")
        case .passcode:
            var passcode = try SecretInput.newPassword("New passcode")
            defer { explicit_bzero(&passcode, passcode.count) }
            try connection.setPasscode(passcode)
            Output.line("passcode: set; `keychain lock` locks, `keychain unlock` unlocks")
        case .login:
            var password = try SecretInput.newPassword("Your login password")
            defer { explicit_bzero(&password, password.count) }
            try connection.setPasscode(password)
            try connection.addLoginSlot(password: password)
            Output.line("passcode: your login password, with a login slot: with the PAM module enabled (`sudo keychain init --pam`), logging in unlocks the keychain")
        }
    }

    private static func unlockChoice(_ c: Context) throws -> Unlock {
        if let given = c.arguments["unlock-with"] {
            guard let choice = Unlock(rawValue: given) else { throw UsageError(message: "--unlock-with takes login, passcode or none") }
            return choice
        }
        guard SecretInput.stdinIsTerminal else { return .login }
        Output.errorRaw("How should the keychain unlock? login (your login password; logging in unlocks it), passcode (a separate one) or none [login]: ")
        let answer = String(decoding: try SecretInput.readLine(), as: UTF8.self).filter { $0 != " " && $0 != "\t" }
        if answer.isEmpty { return .login }
        guard let choice = Unlock(rawValue: answer) else { throw UsageError(message: "answer login, passcode or none") }
        return choice
    }

    // MARK: the bridge and PAM

    private static func enableSecretService(_ c: Context) throws {
        var arguments = ["--enable"]
        if let socket = c.socket { arguments += ["--socket", socket] }
        guard run("keychain-secret-service", arguments) == 0 else {
            throw KeychainError(.notAvailable, "keychain-secret-service --enable failed (its message is above)")
        }
    }

    static let pamProfile = "/usr/share/pam-configs/keychaind"

    private static func enablePAM() throws {
        guard geteuid() == 0 else {
            throw KeychainError(.missingEntitlement, "--pam changes the machine's PAM configuration: run `sudo keychain init --pam` (once, for every user)")
        }
        guard access(pamProfile, R_OK) == 0 else {
            throw KeychainError(.itemNotFound, "\(pamProfile) is missing: install keychaind (`sudo make install` or the .deb) first")
        }
        guard run("pam-auth-update", ["--package", "--enable", "keychaind"]) == 0 else {
            throw KeychainError(.io, "pam-auth-update --enable keychaind failed (its message is above)")
        }
        Output.line("PAM: enabled the keychaind profile (pam-auth-update): a login unlocks the keychain of a user whose login slot matches")
    }

    // MARK: running programs

    private static func env(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

    /// Runs `program` (the one beside this executable first, else from PATH) and waits for it.
    @discardableResult
    static func run(_ program: String, _ arguments: [String], quiet: Bool = false) -> Int32 {
        var path = program
        var exe = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &exe, exe.count - 1)
        if n > 0 {
            let own = String(decoding: exe[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let sibling = String(own[..<(own.lastIndex(of: "/") ?? own.endIndex)]) + "/" + program
            if access(sibling, X_OK) == 0 { path = sibling }
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // A daemon started in the background must not hold our caller's output open.
        if quiet {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        guard posix_spawnp(&pid, path, &actions, nil, argv, environ) == 0 else { return 127 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }
}
