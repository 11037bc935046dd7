#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// The application password of an item added with `--require app-password` (docs/cli.md, "The
/// application password"): typed at the terminal without echo, or the first line of standard
/// input with `--app-password-stdin`. Never an argument or an environment variable: argv is
/// readable by every local user in /proc, and the environment by the user's other processes.
/// keychaind gets it through an authentication context (ops 49, 51, 52) that lives for one call.
enum ApplicationPasswordInput {
    static let stdinFlag = "app-password-stdin"
    static let flags: [(name: String, help: String)] = [
        (stdinFlag, "The application password is the first line of standard input (the secret of add and update, the data of key sign and decrypt, follows it); without it, it is typed at the terminal."),
    ]

    static let howToGive = "type it at the terminal (run the command with standard input on one), or give it on the first line of standard input with --app-password-stdin; never in an argument or the environment"

    /// The password `--app-password-stdin` gives (read before anything else of standard input),
    /// or nil without the flag. The caller wipes it.
    static func fromStdin(_ arguments: Arguments) throws -> [UInt8]? {
        guard arguments.has(stdinFlag) else { return nil }
        return try nonEmpty(SecretInput.readLine())
    }

    /// For `add --require app-password`: the flag's line, else typed twice at the terminal.
    static func forAdd(_ arguments: Arguments) throws -> [UInt8] {
        if let given = try fromStdin(arguments) { return given }
        guard SecretInput.stdinIsTerminal else {
            throw PromptOutcome(error: KeychainError(.interactionNotAllowed, "--require app-password needs the application password, and none was given: nothing was read or stored"),
                                hint: howToGive)
        }
        var first = try SecretInput.prompt("Application password: ")
        var second = try SecretInput.prompt("Again: ")
        defer { explicit_bzero(&second, second.count) }
        guard first == second else {
            explicit_bzero(&first, first.count)
            throw KeychainError(.param, "the two application passwords differ; nothing was stored")
        }
        return try nonEmpty(first)
    }

    /// For a use of a key sealed under an application password (`key sign`, `key decrypt`):
    /// the flag's line, else typed once at the terminal (/dev/tty: standard input carries the
    /// data), else the failure says how to give it.
    static func forKeyUse(_ arguments: Arguments) throws -> [UInt8] {
        if let given = try fromStdin(arguments) { return given }
        let typed: [UInt8]
        do {
            typed = try SecretInput.prompt("Application password: ")
        } catch {
            throw PromptOutcome(error: KeychainError(.interactionNotAllowed, "the key is sealed under an application password, and none was given: nothing was done with it"),
                                hint: "type it at the terminal, or give it on the first line of standard input with --app-password-stdin (the data follows it); never in an argument or the environment")
        }
        return try nonEmpty(typed)
    }

    /// Whether `key` is sealed under an application password (its accc, read when it was found).
    static func seals(_ key: KeychainKey) -> Bool {
        AccessControl(attributes: key.attributes).map { AccessControl.needsApplicationPassword($0.flags) } ?? false
    }

    /// A use of `key` (sign, decrypt): when it is sealed under an application password, the
    /// password first (its line of standard input, or typed at the terminal), then `input`
    /// reads the data, and `use` runs with a context holding the password.
    static func usingKey<T>(_ key: KeychainKey, _ arguments: Arguments, input: () throws -> [UInt8],
                            _ use: ([UInt8], AuthenticationContext?) throws(KeychainError) -> T) throws -> T {
        let sealed = seals(key)
        if arguments.has(stdinFlag) && !sealed {
            throw UsageError(message: "--app-password-stdin is for a key generated with --require app-password")
        }
        var password = sealed ? try forKeyUse(arguments) : nil
        defer { if password != nil { explicit_bzero(&password!, password!.count) } }
        let data = try input()
        return try explained(password != nil) { () throws(KeychainError) in
            try withContext(password, on: key.connection) { (context) throws(KeychainError) in try use(data, context) }
        }
    }

    /// Runs `call` with `password` in a context of its own (none without a password), ended
    /// after the call whatever it answered.
    static func withContext<T>(_ password: [UInt8]?, on connection: KeychainConnection,
                               _ call: (AuthenticationContext?) throws(KeychainError) -> T) throws(KeychainError) -> T {
        guard let password else { return try call(nil) }
        let context = try AuthenticationContext(connection: connection)
        defer { try? context.invalidate() }
        try context.setApplicationPassword(SecretBytes(password))
        return try call(context)
    }

    /// A read or update that needs the password (`call` with a context holding it). When one was
    /// given up front it is used; otherwise `call` runs without one and, when keychaind says
    /// the item is sealed under an application password, the password is typed at the terminal
    /// (stdin a terminal, `mayAsk`) and the call made again, or the failure says how to give it.
    static func run<T>(_ arguments: Arguments, query: AttributeDictionary, on connection: KeychainConnection, mayAsk: Bool = true,
                       given: [UInt8]? = nil,
                       _ call: (AuthenticationContext?) throws(KeychainError) -> T) throws -> T {
        do {
            return try explained(given != nil) { () throws(KeychainError) in try withContext(given, on: connection, call) }
        } catch let error as KeychainError where given == nil && error.status == .interactionNotAllowed && sealed(query, connection) {
            guard mayAsk, SecretInput.stdinIsTerminal else {
                throw PromptOutcome(error: KeychainError(.interactionNotAllowed, "the item's secret is sealed under an application password, and none was given: nothing was read or changed"),
                                    hint: howToGive)
            }
            var typed = try nonEmpty(SecretInput.prompt("Application password: "))
            defer { explicit_bzero(&typed, typed.count) }
            return try explained(true) { () throws(KeychainError) in try withContext(typed, on: connection, call) }
        }
    }

    /// A wrong password's error with what to know about the next try.
    private static func explained<T>(_ withPassword: Bool, _ body: () throws(KeychainError) -> T) throws -> T {
        do throws(KeychainError) {
            return try body()
        } catch {
            guard withPassword && error.status == .authFailed else { throw error }
            throw PromptOutcome(error: error, hint: "the application password is not this item's; each item allows four wrong ones, then waits longer before each next try (1 min, 5 min, 15 min, then 1 h)")
        }
    }

    /// Whether the item `query` finds is sealed under an application password (its accc, read
    /// without its secret, asks nobody). False when the keychain is locked: that cause of
    /// errSecInteractionNotAllowed keeps its own hint.
    private static func sealed(_ query: AttributeDictionary, _ connection: KeychainConnection) -> Bool {
        var attributes = query
        attributes["r_Data"] = nil
        attributes["u_AuthUI"] = nil
        attributes["r_Attributes"] = .bool(true)
        attributes["m_Limit"] = .string("m_LimitOne")
        guard case .single(.attributes(let found))? = try? connection.copyMatching(attributes),
              let control = AccessControl(attributes: found) else { return false }
        return AccessControl.needsApplicationPassword(control.flags)
    }

    private static func nonEmpty(_ password: [UInt8]) throws(UsageError) -> [UInt8] {
        guard !password.isEmpty else { throw UsageError(message: "the application password is empty; nothing was read or changed") }
        return password
    }
}
