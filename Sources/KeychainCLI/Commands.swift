#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import KeychainClient
import KeychainModel

/// `keychain`: the command line over KeychainClient. docs/cli.md documents every command and
/// exit code.
public struct KeychainCommand: ParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "keychain",
        abstract: "Store, find, change and delete secrets in keychaind.",
        discussion: "Secrets are read from standard input (exact bytes), or from a no-echo prompt on a terminal; never from arguments.",
        version: "0.1.0",
        subcommands: [Add.self, Get.self, Update.self, Delete.self, List.self, Status.self,
                      Lock.self, Unlock.self, Passcode.self])

    public init() {}
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

struct GlobalOptions: ParsableArguments {
    @Option(help: "keychaind's socket (default: $KEYCHAIN_SOCKET, else the per-user default).")
    var socket: String?

    @Flag(help: "Machine-readable JSON output.")
    var json = false

    func connection() -> KeychainConnection { KeychainConnection(socketPath: socket) }

    /// Runs `body`, turning a KeychainError into a message (and JSON with --json) and an exit code.
    func run(_ body: () throws(KeychainError) -> Void) throws {
        do {
            try body()
        } catch {
            if json {
                Output.line(JSON.object([("error", JSON.quote(error.status.name)), ("status", String(error.status.rawValue)),
                                         ("message", JSON.quote(error.message))]))
            }
            Output.error("keychain: \(error.message) [\(error.status)]")
            if let hint = ExitStatus.hint(for: error.status) { Output.error("hint: \(hint)") }
            throw ExitCode(ExitStatus.code(for: error.status))
        }
    }
}

enum ItemClassName: String, ExpressibleByArgument, CaseIterable {
    case genericPassword = "generic-password"
    case internetPassword = "internet-password"

    var code: String { self == .genericPassword ? "genp" : "inet" }
}

enum AccessibleName: String, ExpressibleByArgument, CaseIterable {
    case whenUnlocked = "when-unlocked"
    case afterFirstUnlock = "after-first-unlock"
    case always
    case whenUnlockedThisDeviceOnly = "when-unlocked-this-device-only"
    case afterFirstUnlockThisDeviceOnly = "after-first-unlock-this-device-only"
    case alwaysThisDeviceOnly = "always-this-device-only"
    case whenPasscodeSetThisDeviceOnly = "when-passcode-set-this-device-only"

    var pdmn: String {
        switch self {
        case .whenUnlocked: "ak"
        case .afterFirstUnlock: "ck"
        case .always: "dk"
        case .whenUnlockedThisDeviceOnly: "aku"
        case .afterFirstUnlockThisDeviceOnly: "cku"
        case .alwaysThisDeviceOnly: "dku"
        case .whenPasscodeSetThisDeviceOnly: "akpu"
        }
    }

    static func name(ofPdmn pdmn: String) -> String {
        allCases.first { $0.pdmn == pdmn }?.rawValue ?? pdmn
    }
}

/// What names an item: class, service/account, internet-password fields, access group.
struct ItemOptions: ParsableArguments {
    @Option(name: .customLong("class"), help: "generic-password (default) or internet-password.")
    var itemClass: ItemClassName = .genericPassword

    @Option(help: "Service (generic passwords).")
    var service: String?

    @Option(help: "Account.")
    var account: String?

    @Option(help: "Server (internet passwords).")
    var server: String?

    @Option(name: .customLong("protocol"), help: "Protocol (internet passwords): https, http, ftp, ssh, smtp, imap... or a 4-character code.")
    var proto: String?

    @Option(help: "Port (internet passwords).")
    var port: Int?

    @Option(help: "Path (internet passwords).")
    var path: String?

    @Option(help: "Access group (default: the caller's first group).")
    var accessGroup: String?

    func validate() throws {
        if itemClass == .genericPassword && (server != nil || proto != nil || port != nil || path != nil) {
            throw ValidationError("--server, --protocol, --port and --path need --class internet-password")
        }
        if itemClass == .internetPassword && service != nil {
            throw ValidationError("--service is for generic passwords; internet passwords use --server")
        }
    }

    static let protocolCodes: [String: String] = [
        "https": "htps", "http": "http", "ftp": "ftp ", "ftps": "ftps", "ssh": "ssh ", "smtp": "smtp",
        "imap": "imap", "imaps": "imps", "pop3": "pop3", "pop3s": "pops", "ldap": "ldap", "ldaps": "ldps",
        "smb": "smb ", "telnet": "teln", "irc": "irc ", "ircs": "ircs", "socks": "sox ",
    ]

    var query: AttributeDictionary {
        var q: AttributeDictionary = ["class": .string(itemClass.code)]
        if let service { q["svce"] = .string(service) }
        if let account { q["acct"] = .string(account) }
        if let server { q["srvr"] = .string(server) }
        if let proto { q["ptcl"] = .string(Self.protocolCodes[proto.lowercased()] ?? proto) }
        if let port { q["port"] = .int(Int64(port)) }
        if let path { q["path"] = .string(path) }
        if let accessGroup { q["agrp"] = .string(accessGroup) }
        return q
    }
}

struct AttributeOptions: ParsableArguments {
    @Option(help: "Accessibility: \(AccessibleName.allCases.map(\.rawValue).joined(separator: ", ")). Default when-unlocked.")
    var accessible: AccessibleName?

    @Option(help: "Label.")
    var label: String?

    @Option(help: "Comment.")
    var comment: String?

    var attributes: AttributeDictionary {
        var a: AttributeDictionary = [:]
        if let accessible { a["pdmn"] = .string(accessible.pdmn) }
        if let label { a["labl"] = .string(label) }
        if let comment { a["icmt"] = .string(comment) }
        return a
    }
}

struct Add: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Add an item; the secret comes from standard input.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var item: ItemOptions
    @OptionGroup var attributes: AttributeOptions

    func run() throws {
        try global.run { () throws(KeychainError) in
            var secret = try SecretInput.secret()
            defer { explicit_bzero(&secret, secret.count) }
            var dict = item.query.merging(attributes.attributes) { $1 }
            dict["v_Data"] = .data(secret)
            try global.connection().add(dict)
            if global.json { Output.line(JSON.object([("status", "0")])) }
        }
    }
}

struct Get: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write an item's secret to standard output, exactly (with --json: its attributes and the secret in base64).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var item: ItemOptions

    func run() throws {
        try global.run { () throws(KeychainError) in
            var query = item.query
            query["r_Data"] = .bool(true)
            if global.json { query["r_Attributes"] = .bool(true) }
            switch try global.connection().copyMatching(query) {
            case .single(.data(var secret)):
                Output.stdout(secret)
                explicit_bzero(&secret, secret.count)
            case .single(.attributes(let attrs)):
                Output.line(JSON.attributes(attrs))
            default:
                throw KeychainError(.decode, "unexpected answer from keychaind")
            }
        }
    }
}

struct Update: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Change the matching items: a new secret from standard input, and/or attributes.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var item: ItemOptions
    @OptionGroup var attributes: AttributeOptions

    @Flag(help: "Change only the attributes given; keep the secret (no standard input read).")
    var keepSecret = false

    @Option(help: "Rename: the new account.")
    var newAccount: String?

    func run() throws {
        try global.run { () throws(KeychainError) in
            var changes = attributes.attributes
            if let newAccount { changes["acct"] = .string(newAccount) }
            var secret: [UInt8] = []
            defer { explicit_bzero(&secret, secret.count) }
            if !keepSecret {
                secret = try SecretInput.secret()
                changes["v_Data"] = .data(secret)
            }
            guard !changes.isEmpty else {
                throw KeychainError(.param, "nothing to change: give a secret on standard input or an attribute option")
            }
            try global.connection().update(item.query, changes)
            if global.json { Output.line(JSON.object([("status", "0")])) }
        }
    }
}

struct Delete: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Delete every matching item.")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var item: ItemOptions

    func run() throws {
        try global.run { () throws(KeychainError) in
            try global.connection().delete(item.query)
            if global.json { Output.line(JSON.object([("status", "0")])) }
        }
    }
}

struct List: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List items' attributes (never secrets).")
    @OptionGroup var global: GlobalOptions
    @OptionGroup var item: ItemOptions

    func run() throws {
        try global.run { () throws(KeychainError) in
            var query = item.query
            query["r_Attributes"] = .bool(true)
            query["m_Limit"] = .string("m_LimitAll")
            var rows: [AttributeDictionary] = []
            do throws(KeychainError) {
                if case .list(let items) = try global.connection().copyMatching(query) {
                    rows = items.compactMap { if case .attributes(let a) = $0 { a } else { nil } }
                }
            } catch where error.status == .itemNotFound {}
            if global.json {
                Output.line("[" + rows.map(JSON.attributes).joined(separator: ",") + "]")
                return
            }
            let header = ["SERVICE", "ACCOUNT", "GROUP", "ACCESSIBLE", "LABEL", "MODIFIED"]
            let table = rows.map { a -> [String] in
                [text(a[item.itemClass == .genericPassword ? "svce" : "srvr"]), text(a["acct"]), text(a["agrp"]),
                 AccessibleName.name(ofPdmn: text(a["pdmn"])), text(a["labl"]), text(a["mdat"])]
            }
            let widths = header.indices.map { i in ([header[i]] + table.map { $0[i] }).map(\.count).max()! }
            for row in [header] + table {
                Output.line(row.enumerated().map { i, cell in
                    i == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[i] - cell.count)
                }.joined(separator: "  "))
            }
        }
    }

    func text(_ v: AttributeValue?) -> String {
        switch v {
        case .string(let s)?: s
        case .data(let d)?: String(validating: d, as: UTF8.self) ?? JSON.base64(d)
        case .int(let i)?: String(i)
        case .bool(let b)?: String(b)
        case .date(let t)?: JSON.iso8601(t)
        case nil: ""
        }
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show keychaind's version, lock state and passcode state.")
    @OptionGroup var global: GlobalOptions

    func run() throws {
        try global.run { () throws(KeychainError) in
            let info = try global.connection().status()
            if global.json {
                Output.line(JSON.attributes(info))
                return
            }
            for key in info.keys.sorted() {
                Output.line("\(key): \(JSON.value(info[key]!).trimmingQuotes)")
            }
        }
    }
}

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Lock the keychain (admin).")
    @OptionGroup var global: GlobalOptions

    func run() throws {
        try global.run { () throws(KeychainError) in try global.connection().lock() }
    }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Unlock the keychain (admin); the passcode comes from a no-echo prompt or one line of standard input.")
    @OptionGroup var global: GlobalOptions

    func run() throws {
        try global.run { () throws(KeychainError) in
            var passcode = try SecretInput.passcode("Passcode")
            defer { explicit_bzero(&passcode, passcode.count) }
            try global.connection().unlock(passcode: passcode)
        }
    }
}

struct Passcode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Set, change or remove the passcode (admin). Without a terminal, one line of standard input per passcode asked.",
        subcommands: [Set.self, Change.self, Remove.self])

    struct Set: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set a passcode where there is none.")
        @OptionGroup var global: GlobalOptions
        func run() throws {
            try global.run { () throws(KeychainError) in
                var new = try SecretInput.passcode("New passcode")
                defer { explicit_bzero(&new, new.count) }
                try global.connection().setPasscode(new)
            }
        }
    }

    struct Change: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Change the passcode (reads the old, then the new).")
        @OptionGroup var global: GlobalOptions
        func run() throws {
            try global.run { () throws(KeychainError) in
                var old = try SecretInput.passcode("Current passcode")
                var new = try SecretInput.passcode("New passcode")
                defer { explicit_bzero(&old, old.count); explicit_bzero(&new, new.count) }
                try global.connection().changePasscode(old: old, new: new)
            }
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove the passcode; deletes every when-passcode-set-this-device-only item.")
        @OptionGroup var global: GlobalOptions
        func run() throws {
            try global.run { () throws(KeychainError) in
                var current = try SecretInput.passcode("Current passcode")
                defer { explicit_bzero(&current, current.count) }
                try global.connection().removePasscode(current: current)
            }
        }
    }
}

extension String {
    var trimmingQuotes: String {
        hasPrefix("\"") && hasSuffix("\"") && count >= 2 ? String(dropFirst().dropLast()) : self
    }
}

extension KeychainCommand {
    /// `keychain --socket PATH get ...`: ArgumentParser gives options to subcommands only, so a
    /// leading --socket is taken here and passed on as KEYCHAIN_SOCKET.
    public static func mainAcceptingLeadingSocket() {
        var args = Array(CommandLine.arguments.dropFirst())
        if let first = args.first {
            if first == "--socket", args.count >= 2 {
                setenv("KEYCHAIN_SOCKET", args[1], 1)
                args.removeFirst(2)
            } else if first.hasPrefix("--socket=") {
                setenv("KEYCHAIN_SOCKET", String(first.dropFirst("--socket=".count)), 1)
                args.removeFirst()
            }
        }
        main(args)
    }
}
