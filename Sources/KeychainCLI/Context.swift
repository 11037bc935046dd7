import KeychainClient
import KeychainModel

/// The global options given before the command (`keychain --socket PATH get ...`), which the
/// command's own override.
struct LeadingOptions {
    var socket: String?
    var trustUID: String?
}

/// One parsed invocation: its options, the connection, and the JSON switch.
struct Context {
    let arguments: Arguments
    let socket: String?
    /// --trust-uid, resolved when the connection is made (a bad name is a keychain error).
    let trustUID: String?
    let json: Bool

    /// `leading`: the global options given before the command.
    init(_ arguments: Arguments, leading: LeadingOptions = LeadingOptions()) throws(UsageError) {
        self.arguments = arguments
        socket = arguments["socket"] ?? leading.socket
        trustUID = arguments["trust-uid"] ?? leading.trustUID
        json = arguments.has("json")
    }

    func connection() throws(KeychainError) -> KeychainConnection {
        KeychainConnection(socketPath: socket, trust: try trustUID.map { (uid) throws(KeychainError) in try ServerTrust.resolve(uid) })
    }

    /// Runs `body`, turning a KeychainError into a message and hint (with --json: only the
    /// JSON object, so that a script reads one document) and an exit code, and a UsageError
    /// into exit 64.
    func run(_ body: (Context) throws -> Void) -> Int32 {
        do {
            try body(self)
            return ExitStatus.success
        } catch let error as UsageError {
            if json {
                printErrorJSON(KeychainError(.param, error.message))
                return ExitStatus.usage
            }
            return KeychainCommand.usage(error.message, spec: arguments.spec)
        } catch let outcome as PromptOutcome {
            if json {
                printErrorJSON(outcome.error)
                return ExitStatus.code(for: outcome.error.status)
            }
            Output.error("keychain: \(outcome.error.message) [\(outcome.error.status)]")
            if let hint = outcome.hint { Output.error("hint: \(hint)") }
            return ExitStatus.code(for: outcome.error.status)
        } catch let error as KeychainError {
            if json {
                printErrorJSON(error)
                return ExitStatus.code(for: error.status)
            }
            Output.error("keychain: \(error.message) [\(error.status)]")
            if let hint = ExitStatus.hint(for: error.status, command: arguments.spec.name, retryAfter: retryAfter(error)) {
                Output.error("hint: \(hint)")
            }
            return ExitStatus.code(for: error.status)
        } catch {
            if json {
                Output.line(JSON.object([("error", JSON.quote("error")), ("status", "1"), ("message", JSON.quote("\(error)"))]))
            } else {
                Output.error("keychain: \(error)")
            }
            return ExitStatus.otherError
        }
    }

    private func printErrorJSON(_ error: KeychainError) {
        Output.line(JSON.object([("error", JSON.quote(error.status.name)), ("status", String(error.status.rawValue)),
                                 ("message", JSON.quote(error.message))]))
    }

    /// After a refused passcode: how long the daemon now checks none (a status call; a
    /// throttled unlock checked nothing, so "not correct" would be wrong).
    private func retryAfter(_ error: KeychainError) -> Int64 {
        guard error.status == .authFailed, ExitStatus.passcodeCommands.contains(arguments.spec.name), let info = try? connection().status(),
              case .int(let seconds)? = info["retry_after"] else { return 0 }
        return seconds
    }

    func printStatusJSON() {
        if json { Output.line(JSON.object([("status", "0")])) }
    }

    // MARK: item naming

    /// The query naming the items: class, service/account, internet fields, access group, and
    /// sync: 1 with --synchronizable, else (searches only) either kind. SecItem's own rule,
    /// "no sync means local items only", would make a synced item invisible to a plain
    /// `keychain get` on the device it arrived on.
    func itemQuery(adding: Bool = false) throws(UsageError) -> AttributeDictionary {
        let a = arguments
        let internet = try a.choice("class", ["generic-password", "internet-password"]) == "internet-password"
        let inetOnly = ["server", "protocol", "port", "path"].filter { a[$0] != nil }
        if !internet, let first = inetOnly.first {
            throw UsageError(message: "--\(first) needs --class internet-password")
        }
        if internet && a["service"] != nil {
            throw UsageError(message: "--service is for generic passwords; internet passwords use --server")
        }
        var q: AttributeDictionary = ["class": .string(internet ? "inet" : "genp")]
        if let v = a["service"] { q["svce"] = .string(v) }
        if let v = a["account"] { q["acct"] = .string(v) }
        if let v = a["server"] { q["srvr"] = .string(v) }
        if let v = a["protocol"] { q["ptcl"] = .string(InternetProtocol.code(v)) }
        if let v = try a.integer("port", in: 0...65535) { q["port"] = .int(Int64(v)) }
        if let v = a["path"] { q["path"] = .string(v) }
        if let v = a["access-group"] { q["agrp"] = .string(v) }
        if a.has("synchronizable") {
            q["sync"] = .int(1)
        } else if !adding {
            q["sync"] = .string("syna")
        }
        return q
    }

    /// --accessible, --label, --comment, --expires.
    func itemAttributes() throws(UsageError) -> AttributeDictionary {
        var attrs: AttributeDictionary = [:]
        if let name = try arguments.choice("accessible", Accessible.names) {
            attrs["pdmn"] = .string(Accessible.pdmn(named: name)!)
        }
        if let v = arguments["label"] { attrs["labl"] = .string(v) }
        if let v = arguments["comment"] { attrs["icmt"] = .string(v) }
        if let v = arguments["expires"] { attrs["expd"] = try ExpiryTime.parse(v, now: ExpiryTime.unixNow()) }
        return attrs
    }

    var isInternetPassword: Bool { arguments["class"] == "internet-password" }
}
