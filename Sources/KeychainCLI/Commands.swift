#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain`: the command line over KeychainClient. docs/cli.md documents every command and
/// exit code.
public enum KeychainCommand {

    /// Runs the command line and exits with its status.
    public static func main() -> Never {
        exit(run(Array(CommandLine.arguments.dropFirst())))
    }

    /// Runs one invocation; returns the exit status.
    static func run(_ argv: [String]) -> Int32 {
        var args = argv[...]
        // `keychain --socket PATH <command>`: the leading form of the global option.
        var leadingSocket: String?
        if let first = args.first, first == "--socket" || first.hasPrefix("--socket=") {
            if first == "--socket" {
                guard args.count >= 2 else { return usage("--socket needs a value", spec: nil) }
                leadingSocket = args[args.startIndex + 1]
                args = args.dropFirst(2)
            } else {
                leadingSocket = String(first.dropFirst("--socket=".count))
                args = args.dropFirst()
            }
        }
        guard let name = args.first else { return usage("no command given", spec: nil) }
        switch name {
        case "--help", "-h", "help":
            Output.line(overview)
            return ExitStatus.success
        case "--version":
            Output.line(KeychainVersion.current)
            return ExitStatus.success
        default: break
        }
        var path = [name]
        args = args.dropFirst()
        if name == "passcode" {
            guard let sub = args.first, ["set", "change", "remove"].contains(sub) else {
                return usage("`keychain passcode` needs one of: set, change, remove", spec: nil)
            }
            path.append(sub)
            args = args.dropFirst()
        }
        guard let command = commands.first(where: { $0.spec.name == path.joined(separator: " ") }) else {
            return usage("unknown command '\(name)'", spec: nil)
        }
        do {
            let parsed = try Arguments(args, spec: command.spec)
            if parsed.wantsHelp {
                Output.line(command.spec.usage)
                return ExitStatus.success
            }
            let context = try Context(parsed, leadingSocket: leadingSocket)
            return context.run(command.body)
        } catch {
            return usage(error.message, spec: command.spec)
        }
    }

    static func usage(_ message: String, spec: CommandSpec?) -> Int32 {
        Output.error("keychain: \(message)")
        Output.error(spec.map { "Usage: keychain \($0.name) [options]; see `keychain \($0.name) --help`" }
                     ?? "Usage: keychain <command> [options]; see `keychain --help`")
        return ExitStatus.usage
    }

    static var overview: String {
        var lines = [
            "Usage: keychain [--socket PATH] <command> [options]", "",
            "Store, find, change and delete secrets in keychaind. Secrets are read from standard",
            "input (exact bytes), or from a no-echo prompt on a terminal; never from arguments.", "",
            "Commands:",
        ]
        for c in commands { lines.append("  " + c.spec.name.padding(18) + c.spec.summary) }
        lines += ["", "Exit codes: 0 ok, 1 error, 2 not found, 3 duplicate, 4 locked, 5 access denied,",
                  "6 authentication failed, 7 keychaind unreachable, 64 usage (docs/cli.md)."]
        return lines.joined(separator: "\n")
    }
}

/// One parsed invocation: its options, the connection, and the JSON switch.
struct Context {
    let arguments: Arguments
    let socket: String?
    /// --trust-uid, resolved when the connection is made (a bad name is a keychain error).
    let trustUID: String?
    let json: Bool

    init(_ arguments: Arguments, leadingSocket: String?) throws(UsageError) {
        self.arguments = arguments
        socket = arguments["socket"] ?? leadingSocket
        trustUID = arguments["trust-uid"]
        json = arguments.has("json")
    }

    func connection() throws(KeychainError) -> KeychainConnection {
        KeychainConnection(socketPath: socket, trust: try trustUID.map { (uid) throws(KeychainError) in try ServerTrust.resolve(uid) })
    }

    /// Runs `body`, turning a KeychainError into a message (and JSON with --json) and an exit
    /// code, and a UsageError into exit 64.
    func run(_ body: (Context) throws -> Void) -> Int32 {
        do {
            try body(self)
            return ExitStatus.success
        } catch let error as UsageError {
            return KeychainCommand.usage(error.message, spec: arguments.spec)
        } catch let error as KeychainError {
            if json {
                Output.line(JSON.object([("error", JSON.quote(error.status.name)), ("status", String(error.status.rawValue)),
                                         ("message", JSON.quote(error.message))]))
            }
            Output.error("keychain: \(error.message) [\(error.status)]")
            // Backup and restore messages say what to do themselves; the item hints would mislead.
            if !["backup", "restore"].contains(arguments.spec.name), let hint = ExitStatus.hint(for: error.status) {
                Output.error("hint: \(hint)")
            }
            return ExitStatus.code(for: error.status)
        } catch {
            Output.error("keychain: \(error)")
            return ExitStatus.otherError
        }
    }

    func printStatusJSON() {
        if json { Output.line(JSON.object([("status", "0")])) }
    }

    // MARK: item naming

    /// The query naming the items: class, service/account, internet fields, access group.
    func itemQuery() throws(UsageError) -> AttributeDictionary {
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
        return q
    }

    /// --accessible, --label, --comment.
    func itemAttributes() throws(UsageError) -> AttributeDictionary {
        var attrs: AttributeDictionary = [:]
        if let name = try arguments.choice("accessible", Accessible.names) {
            attrs["pdmn"] = .string(Accessible.pdmn(named: name)!)
        }
        if let v = arguments["label"] { attrs["labl"] = .string(v) }
        if let v = arguments["comment"] { attrs["icmt"] = .string(v) }
        return attrs
    }

    var isInternetPassword: Bool { arguments["class"] == "internet-password" }
}

/// kSecAttrAccessible by the CLI's names: the Protection cases in kebab case
/// (whenUnlockedThisDeviceOnly is when-unlocked-this-device-only).
enum Accessible {
    static let table: [(name: String, pdmn: String)] = Protection.allCases.map { (kebab("\($0)"), $0.rawValue) }
    static var names: [String] { table.map(\.name) }
    static func pdmn(named name: String) -> String? { table.first { $0.name == name }?.pdmn }
    static func name(ofPdmn pdmn: String) -> String { table.first { $0.pdmn == pdmn }?.name ?? pdmn }

    static func kebab(_ camel: String) -> String {
        var out = ""
        for c in camel {
            if c.isUppercase {
                out += "-" + c.lowercased()
            } else {
                out.append(c)
            }
        }
        return out
    }
}

/// A command: its spec and what it does.
struct Command: Sendable {
    let spec: CommandSpec
    let body: @Sendable (Context) throws -> Void
}

private let globalOptions: [(name: String, help: String)] = [
    ("socket", "keychaind's socket (default: $KEYCHAIN_SOCKET, else the per-user default)."),
    ("trust-uid", "Also talk to a keychaind running as this uid or user (default: $KEYCHAIN_TRUST_UID); root's and your own are always trusted."),
]
private let jsonFlag: [(name: String, help: String)] = [("json", "Machine-readable JSON output.")]
private let itemOptions: [(name: String, help: String)] = [
    ("class", "generic-password (default) or internet-password."),
    ("service", "Service (generic passwords)."),
    ("account", "Account."),
    ("server", "Server (internet passwords)."),
    ("protocol", "Protocol (internet passwords): https, http, ftp, ssh, smtp, imap... or a 4-character code."),
    ("port", "Port (internet passwords)."),
    ("path", "Path (internet passwords)."),
    ("access-group", "Access group (default: the caller's first group)."),
]
private let attributeOptions: [(name: String, help: String)] = [
    ("accessible", "when-unlocked (default), after-first-unlock, always, their -this-device-only forms, when-passcode-set-this-device-only."),
    ("label", "Label."),
    ("comment", "Comment."),
]

let commands: [Command] = [
    Command(spec: CommandSpec(name: "add", summary: "Add an item; the secret comes from standard input.",
                              options: globalOptions + itemOptions + attributeOptions, flags: jsonFlag)) { c in
        var dict = try c.itemQuery().merging(try c.itemAttributes()) { $1 }
        var secret = try SecretInput.secret()
        defer { explicit_bzero(&secret, secret.count) }
        dict["v_Data"] = .data(secret)
        try c.connection().add(dict)
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "get", summary: "Write an item's secret to standard output, exactly (--json: attributes and the secret in base64).",
                              options: globalOptions + itemOptions, flags: jsonFlag)) { c in
        var query = try c.itemQuery()
        query["r_Data"] = .bool(true)
        if c.json { query["r_Attributes"] = .bool(true) }
        switch try c.connection().copyMatching(query) {
        case .single(.data(let secret)):
            Output.stdout(secret)  // SecretBytes: wiped when released
        case .single(.attributes(let attrs)):
            Output.line(JSON.attributes(attrs))
        default:
            throw KeychainError(.decode, "unexpected answer from keychaind")
        }
    },
    Command(spec: CommandSpec(name: "update", summary: "Change matching items: a new secret from standard input, and/or attributes.",
                              options: globalOptions + itemOptions + attributeOptions + [("new-account", "Rename: the new account.")],
                              flags: jsonFlag + [("keep-secret", "Change only the attributes given; keep the secret (standard input is not read).")])) { c in
        let query = try c.itemQuery()
        var changes = try c.itemAttributes()
        if let v = c.arguments["new-account"] { changes["acct"] = .string(v) }
        var secret: [UInt8] = []
        defer { explicit_bzero(&secret, secret.count) }
        if !c.arguments.has("keep-secret") {
            secret = try SecretInput.secret()
            changes["v_Data"] = .data(secret)
        }
        guard !changes.isEmpty else {
            throw UsageError(message: "nothing to change: give attribute options with --keep-secret")
        }
        try c.connection().update(query, changes)
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "delete", summary: "Delete every matching item.",
                              options: globalOptions + itemOptions, flags: jsonFlag)) { c in
        try c.connection().delete(try c.itemQuery())
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "list", summary: "List matching items' attributes (never secrets).",
                              options: globalOptions + itemOptions, flags: jsonFlag)) { c in
        try ListCommand.run(c)
    },
    Command(spec: CommandSpec(name: "status", summary: "Show keychaind's version, lock state and passcode state.",
                              options: globalOptions, flags: jsonFlag)) { c in
        let info = try c.connection().status()
        if c.json {
            Output.line(JSON.attributes(info))
            return
        }
        for key in info.keys.sorted() {
            Output.line("\(key): \(JSON.value(info[key]!).trimmingQuotes)")
        }
    },
    Command(spec: CommandSpec(name: "lock", summary: "Lock the keychain (admin).", options: globalOptions, flags: jsonFlag)) { c in
        try c.connection().lock()
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "unlock", summary: "Unlock (admin): passcode from a no-echo prompt or one line of standard input.",
                              options: globalOptions, flags: jsonFlag)) { c in
        var passcode = try SecretInput.passcode("Passcode")
        defer { explicit_bzero(&passcode, passcode.count) }
        try c.connection().unlock(passcode: passcode)
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "backup", summary: "Write an encrypted backup of every item that may leave this device (admin; unlocked).",
                              options: globalOptions + [("out", "The backup file to write (0600, atomically).")],
                              flags: jsonFlag)) { c in
        try BackupCommands.backup(c)
    },
    Command(spec: CommandSpec(name: "restore", summary: "Restore a backup file here, in one transaction (admin; unlocked).",
                              options: globalOptions + [("on-conflict", "skip, replace or fail (default: fail, before writing anything).")],
                              flags: jsonFlag, positional: "FILE")) { c in
        try BackupCommands.restore(c)
    },
    Command(spec: CommandSpec(name: "passcode set", summary: "Set a passcode where there is none (admin).",
                              options: globalOptions, flags: jsonFlag)) { c in
        var new = try SecretInput.newPassword("New passcode")
        defer { explicit_bzero(&new, new.count) }
        try c.connection().setPasscode(new)
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "passcode change", summary: "Change the passcode (admin; reads the old, then the new).",
                              options: globalOptions, flags: jsonFlag)) { c in
        var old = try SecretInput.passcode("Current passcode")
        var new = try SecretInput.newPassword("New passcode")
        defer { explicit_bzero(&old, old.count); explicit_bzero(&new, new.count) }
        try c.connection().changePasscode(old: old, new: new)
        c.printStatusJSON()
    },
    Command(spec: CommandSpec(name: "passcode remove", summary: "Remove the passcode (admin); deletes when-passcode-set-this-device-only items.",
                              options: globalOptions, flags: jsonFlag)) { c in
        var current = try SecretInput.passcode("Current passcode")
        defer { explicit_bzero(&current, current.count) }
        try c.connection().removePasscode(current: current)
        c.printStatusJSON()
    },
]

/// `keychain backup` and `keychain restore`.
enum BackupCommands {
    static func backup(_ c: Context) throws {
        guard let out = c.arguments["out"] else { throw UsageError(message: "backup needs --out FILE") }
        var password = try SecretInput.newPassword("Backup password")
        defer { explicit_bzero(&password, password.count) }
        let progress = Progress(label: "backup")
        let (file, info) = try c.connection().backup(password: password, progress: progress.update)
        progress.finish()
        try AtomicFile.write(file, to: out)
        if c.json {
            Output.line(JSON.attributes(info.filter { $0.key != "session" }.merging(["file": .string(out)]) { $1 }))
            return
        }
        Output.error("backed up \(ListCommand.text(info["items"])) item(s) to \(out); \(ListCommand.text(info["note"]))")
    }

    static func restore(_ c: Context) throws {
        guard let path = c.arguments["FILE"] else { throw UsageError(message: "restore needs the backup FILE") }
        let policy = try c.arguments.choice("on-conflict", ConflictPolicy.allCases.map(\.rawValue)).flatMap(ConflictPolicy.init(rawValue:)) ?? .fail
        let file = try AtomicFile.read(path)
        var password = try SecretInput.passcode("Backup password")
        defer { explicit_bzero(&password, password.count) }
        let progress = Progress(label: "restore")
        let summary = try c.connection().restore(file, password: password, onConflict: policy, progress: progress.update)
        progress.finish()
        if c.json {
            Output.line(JSON.attributes(summary))
            return
        }
        Output.error("restored \(ListCommand.text(summary["restored"])), skipped \(ListCommand.text(summary["skipped"])), replaced \(ListCommand.text(summary["replaced"])); the backup notes: \(ListCommand.text(summary["note"]))")
    }
}

/// A progress bar on a terminal (standard error), plain lines otherwise.
final class Progress {
    let label: String
    let terminal = isatty(2) == 1
    private var lastPercent = -1

    init(label: String) { self.label = label }

    func update(_ done: Int, _ total: Int) {
        let percent = total == 0 ? 100 : done * 100 / total
        guard percent != lastPercent else { return }
        lastPercent = percent
        if terminal {
            let filled = percent * 30 / 100
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled)
            Output.errorRaw("\r\(label) [\(bar)] \(percent)% (\(done)/\(total) bytes)")
        } else {
            Output.error("\(label): \(percent)% (\(done)/\(total) bytes)")
        }
    }

    func finish() {
        if terminal && lastPercent >= 0 { Output.errorRaw("\n") }
    }
}

/// Whole-file reads, and writes that never leave a half-written backup: a temporary file in
/// the same directory (0600), fsync, rename, fsync of the directory.
enum AtomicFile {
    static func write(_ bytes: [UInt8], to path: String) throws(KeychainError) {
        let tmp = path + ".tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw KeychainError(.io, "cannot create \(tmp): \(String(cString: strerror(errno)))") }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if n <= 0 {
                if n < 0 && errno == EINTR { continue }
                let message = String(cString: strerror(errno))
                close(fd)
                unlink(tmp)
                throw KeychainError(.io, "cannot write \(tmp): \(message)")
            }
            offset += n
        }
        guard fsync(fd) == 0 else {
            close(fd)
            unlink(tmp)
            throw KeychainError(.io, "cannot sync \(tmp)")
        }
        close(fd)
        guard rename(tmp, path) == 0 else {
            unlink(tmp)
            throw KeychainError(.io, "cannot rename \(tmp) to \(path): \(String(cString: strerror(errno)))")
        }
        let dir = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        let dfd = open(dir.isEmpty ? "/" : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 {
            fsync(dfd)
            close(dfd)
        }
    }

    static func read(_ path: String) throws(KeychainError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw KeychainError(.io, "cannot open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n == 0 { break }
            if n < 0 {
                if errno == EINTR { continue }
                throw KeychainError(.io, "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            out += chunk[0..<n]
        }
        return out
    }
}

enum ListCommand {
    static func run(_ c: Context) throws {
        var query = try c.itemQuery()
        query["r_Attributes"] = .bool(true)
        query["m_Limit"] = .string("m_LimitAll")
        let rows = try matching(query, c.connection())
        if c.json {
            Output.line(JSON.array(rows))
            return
        }
        let header = ["SERVICE", "ACCOUNT", "GROUP", "ACCESSIBLE", "LABEL", "MODIFIED"]
        let table = rows.map { a -> [String] in
            [text(a[c.isInternetPassword ? "srvr" : "svce"]), text(a["acct"]), text(a["agrp"]),
             Accessible.name(ofPdmn: text(a["pdmn"])), text(a["labl"]), text(a["mdat"])]
        }
        let widths = header.indices.map { i in ([header[i]] + table.map { $0[i] }).map(\.count).max()! }
        for row in [header] + table {
            Output.line(row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell.padding(widths[i] + 1)
            }.joined(separator: " "))
        }
    }

    /// Every match's attributes; none is an empty list, not an error.
    static func matching(_ query: AttributeDictionary, _ connection: KeychainConnection) throws(KeychainError) -> [AttributeDictionary] {
        let result: QueryResult
        do {
            result = try connection.copyMatching(query)
        } catch where error.status == .itemNotFound {
            return []
        }
        guard case .list(let items) = result else { return [] }
        return items.compactMap { if case .attributes(let a) = $0 { a } else { nil } }
    }

    static func text(_ v: AttributeValue?) -> String {
        switch v {
        case .string(let s)?: s
        case .data(let d)?: String(validating: Array(d), as: UTF8.self) ?? JSON.base64(d)
        case .int(let i)?: String(i)
        case .bool(let b)?: String(b)
        case .date(let t)?: JSON.iso8601(t)
        case nil: ""
        }
    }
}

extension String {
    var trimmingQuotes: String {
        hasPrefix("\"") && hasSuffix("\"") && count >= 2 ? String(dropFirst().dropLast()) : self
    }
}

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

