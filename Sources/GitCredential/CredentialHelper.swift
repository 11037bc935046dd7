#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// git's credential-helper protocol (gitcredentials(7), git-credential(1)) over keychaind.
///
/// A credential is an internet-password item in the caller's default access group: server
/// (`host` without its port), protocol, port, path (sent by git only with
/// credential.useHttpPath), account (`username`), the password as the secret, git's
/// `password_expiry_utc` as the item's expiry (`expd`: keychaind then never returns it after
/// that time, and sweeps it). An OAuth refresh token is a second item with the same identity and
/// authentication type "oaut", so that neither secret is ever stored with the other.
public struct CredentialHelper {
    let connection: KeychainConnection
    let warn: (String) -> Void

    public init(connection: KeychainConnection, warn: @escaping (String) -> Void) {
        self.connection = connection
        self.warn = warn
    }

    /// Parses git's `key=value` lines up to a blank line or the end. Keys git may send that
    /// this helper does not use (wwwauth[], capability[], state[], authtype, ephemeral...) are
    /// read and ignored.
    public static func parse(_ input: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        for raw in input.split(separator: 10, omittingEmptySubsequences: false) {
            var line = raw
            if line.last == 13 { line = line.dropLast() }
            if line.isEmpty { break }
            guard let eq = line.firstIndex(of: 61) else { continue }
            let key = String(decoding: line[line.startIndex..<eq], as: UTF8.self)
            fields[key] = String(decoding: line[(eq + 1)...], as: UTF8.self)
        }
        return fields
    }

    /// The attributes naming the credential git describes; nil when git named neither a host
    /// nor a path (git's own store helper then has no key either). A `cert://` credential has
    /// an empty host and the certificate file as its path. `asQuery`: a field git left out
    /// (path, username) matches any value, as in git's store helper and libsecret; when
    /// storing, a missing path is the empty one.
    func identity(_ fields: [String: String], authType: String = "dflt", asQuery: Bool) -> AttributeDictionary? {
        let hostField = fields["host"] ?? ""
        let path = fields["path"] ?? ""
        guard !hostField.isEmpty || !path.isEmpty else { return nil }
        var host = hostField
        var port: Int64 = 0
        // host may carry a port ("example.com:8443"; IPv6 "[::1]:8443").
        if let colon = hostField.lastIndex(of: ":"), !hostField.hasSuffix("]"),
           let p = Int64(hostField[hostField.index(after: colon)...]) {
            host = String(hostField[..<colon])
            port = p
        }
        var item: AttributeDictionary = [
            "class": .string("inet"), "srvr": .string(host), "port": .int(port),
            "ptcl": .string(InternetProtocol.code(fields["protocol"] ?? "")), "atyp": .string(authType),
        ]
        if !asQuery || fields["path"] != nil { item["path"] = .string(path) }
        if let user = fields["username"] {
            item["acct"] = .string(user)
        } else if !asQuery {
            item["acct"] = .string("")
        }
        return item
    }

    /// Every stored credential a query matches, with attributes and password.
    private func matches(_ query: AttributeDictionary) throws(KeychainError) -> [AttributeDictionary] {
        var q = query
        q["r_Attributes"] = .bool(true)
        q["r_Data"] = .bool(true)
        q["m_Limit"] = .string("m_LimitAll")
        do {
            guard case .list(let found) = try connection.copyMatching(q) else { return [] }
            return found.compactMap { if case .attributes(let a) = $0 { a } else { nil } }
        } catch where error.status == .itemNotFound {
            return []
        }
    }

    /// Which of several matching credentials `get` returns, so that the answer does not
    /// depend on the daemon's row order: the one stored with exactly the path git sent (no
    /// path: the one stored without one), then the most recently stored, as git's store
    /// helper (which writes the newest credential first); then by path and username.
    static func preferred(_ found: [AttributeDictionary], path: String?) -> AttributeDictionary? {
        func key(_ item: AttributeDictionary) -> (exact: Bool, modified: Double, path: String, account: String) {
            let storedPath = item["path"]?.stringValue ?? ""
            var modified = 0.0
            if case .date(let d)? = item["mdat"] { modified = d }
            return (storedPath == (path ?? ""), modified, storedPath, item["acct"]?.stringValue ?? "")
        }
        return found.min { a, b in
            let x = key(a), y = key(b)
            if x.exact != y.exact { return x.exact }
            if x.modified != y.modified { return x.modified > y.modified }
            if x.path != y.path { return x.path < y.path }
            return x.account < y.account
        }
    }

    /// `get`: the matching credential as git's lines, or nothing.
    public func get(_ fields: [String: String]) -> String {
        guard let query = identity(fields, asQuery: true) else { return "" }
        do {
            guard let found = Self.preferred(try matches(query), path: fields["path"]),
                  case .data(let password)? = found["v_Data"],
                  let passwordText = String(validating: password, as: UTF8.self) else { return "" }
            var out = ""
            if case .string(let user)? = found["acct"] { out += "username=\(user)\n" }
            out += "password=\(passwordText)\n"
            if let expiry = Self.expiry(of: found) { out += "password_expiry_utc=\(expiry)\n" }
            if let token = try refreshToken(found) { out += "oauth_refresh_token=\(token)\n" }
            return out
        } catch {
            quietly(error)
            return ""
        }
    }

    /// The exact identity of a stored credential (its primary key), to act on it alone.
    private static func exactIdentity(of found: AttributeDictionary, authType: String) -> AttributeDictionary {
        var q: AttributeDictionary = ["class": .string("inet"), "atyp": .string(authType)]
        for code in ["srvr", "ptcl", "port", "path", "acct", "sdmn", "agrp"] { q[code] = found[code] }
        return q
    }

    private func refreshToken(_ found: AttributeDictionary) throws(KeychainError) -> String? {
        var q = Self.exactIdentity(of: found, authType: "oaut")
        q["r_Data"] = .bool(true)
        do {
            guard case .single(.data(let token)) = try connection.copyMatching(q) else { return nil }
            return String(validating: token, as: UTF8.self)
        } catch where error.status == .itemNotFound {
            return nil
        }
    }

    /// `store`: adds or replaces the credential (and its refresh token, if git sent one).
    /// Like git's store helper, a credential needs a username, except a certificate's
    /// passphrase (git sends an empty one, or none).
    public func store(_ fields: [String: String]) {
        guard var item = identity(fields, asQuery: false), let password = fields["password"],
              fields["username"] != nil || fields["protocol"] == "cert" else { return }
        let name = fields["host"].flatMap { $0.isEmpty ? nil : $0 } ?? fields["path"] ?? ""
        var changes: AttributeDictionary = ["v_Data": .data(Array(password.utf8)),
                                            "labl": .string("git: \(name)")]
        if let expiry = fields["password_expiry_utc"].flatMap({ Int64($0) }) {
            changes["expd"] = .date(Double(expiry) - absoluteTimeIntervalSince1970)
        }
        do {
            try upsert(item, changes, replacingExpiry: true)
            if let token = fields["oauth_refresh_token"] {
                item["atyp"] = .string("oaut")
                try upsert(item, ["v_Data": .data(Array(token.utf8)), "labl": .string("git refresh token: \(name)")])
            }
        } catch {
            quietly(error)
        }
    }

    /// Adds, or changes the stored item. `replacingExpiry`: the credential's expiry is the one
    /// git sent now; an update cannot take an attribute away, so a stored credential that had
    /// an expiry, stored again without one, is deleted and added anew.
    private func upsert(_ identity: AttributeDictionary, _ changes: AttributeDictionary,
                        replacingExpiry: Bool = false) throws(KeychainError) {
        do {
            try connection.add(identity.merging(changes) { $1 })
        } catch where error.status == .duplicateItem {
            if replacingExpiry && changes["expd"] == nil, try hasExpiry(identity) {
                try deleteIfPresent(identity)
                try connection.add(identity.merging(changes) { $1 })
            } else {
                try connection.update(identity, changes)
            }
        }
    }

    private func hasExpiry(_ identity: AttributeDictionary) throws(KeychainError) -> Bool {
        var q = identity
        q["r_Attributes"] = .bool(true)
        do {
            guard case .single(.attributes(let found)) = try connection.copyMatching(q) else { return false }
            return found["expd"] != nil
        } catch where error.status == .itemNotFound {
            return false
        }
    }

    /// A credential's expiry as git's Unix seconds: `expd`, or the comment where helpers
    /// before `expd` kept it.
    static func expiry(of found: AttributeDictionary) -> Int64? {
        if case .date(let t)? = found["expd"] { return Int64((t + absoluteTimeIntervalSince1970).rounded()) }
        if case .string(let comment)? = found["icmt"] { return Int64(comment) }
        return nil
    }

    /// `erase`: removes the matching credentials and their refresh tokens. When git names the
    /// password (it does since 2.40), only the credentials with that password are erased, each
    /// on its own, so a credential stored since by another process survives.
    public func erase(_ fields: [String: String]) {
        guard let query = identity(fields, asQuery: true) else { return }
        do {
            if let password = fields["password"] {
                let wanted = SecretBytes(password.utf8)
                for found in try matches(query) {
                    guard case .data(let stored)? = found["v_Data"], stored == wanted else { continue }
                    try deleteIfPresent(Self.exactIdentity(of: found, authType: "dflt"))
                    try deleteIfPresent(Self.exactIdentity(of: found, authType: "oaut"))
                }
            } else {
                try deleteIfPresent(query)
                var token = query
                token["atyp"] = .string("oaut")
                try deleteIfPresent(token)
            }
        } catch {
            quietly(error)
        }
    }

    private func deleteIfPresent(_ query: AttributeDictionary) throws(KeychainError) {
        do {
            try connection.delete(query)
        } catch where error.status == .itemNotFound {}
    }

    /// A failure never reaches git's standard output: git then asks the user, as without a
    /// helper. A hint goes to standard error.
    private func quietly(_ error: KeychainError) {
        switch error.status {
        case .itemNotFound: break
        case .interactionNotAllowed: warn("keychain: locked; run `keychain unlock` to use stored git credentials")
        case .serviceNotAvailable:
            // The connection's message says what went wrong; the socket is named again because
            // the helper has no --socket option to point it elsewhere.
            warn("keychain: \(error.message)")
            warn("keychain: git credentials are not read or stored until keychaind answers at \(connection.socketPath) (set KEYCHAIN_SOCKET to use another socket)")
        default: warn("keychain: \(error.message)")
        }
    }

    /// Runs the helper for git: `action` is get, store or erase; reads standard input.
    /// `[--trust-uid UID|USER] ACTION`: git passes what follows the helper's name in
    /// credential.helper, so `keychain --trust-uid 995` trusts a daemon running as uid 995.
    public static func main(arguments: [String]) -> Int32 {
        // Before anything reads standard input: at a terminal, that would wait for EOF.
        if arguments.contains(where: { $0 == "--help" || $0 == "-h" }) {
            writeOut(usageText)
            return 0
        }
        var arguments = arguments[...]
        var trust: ServerTrust?
        if arguments.first == "--trust-uid" {
            guard arguments.count >= 3 else { return usage() }
            do {
                trust = try ServerTrust.resolve(arguments[arguments.startIndex + 1])
            } catch {
                writeErr("keychain: \(error.message)\n")
                return 64
            }
            arguments = arguments.dropFirst(2)
        }
        guard let action = arguments.first else { return usage() }
        let helper = CredentialHelper(connection: KeychainConnection(trust: trust), warn: { writeErr($0 + "\n") })
        let fields = parse(readAll())
        switch action {
        case "get": writeOut(helper.get(fields))
        case "store": helper.store(fields)
        case "erase": helper.erase(fields)
        default: break  // git's rule: ignore actions a helper does not know
        }
        return 0
    }

    static let usageText = """
        usage: git-credential-keychain [--trust-uid UID|USER] get|store|erase
        git runs it with the credential on standard input; set it up with
          git config --global credential.helper keychain
        It talks to keychaind at $KEYCHAIN_SOCKET, else the default socket (docs/git-credential.md).

        """

    static func usage() -> Int32 {
        writeErr(usageText)
        return 64
    }

    static func readAll() -> [UInt8] {
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        // An error ends the input like its end: git's request is then incomplete, and refused.
        while let n = chunk.withUnsafeMutableBytes({ b in try? SystemCall.retrying("read") { read(0, b.baseAddress, b.count) } }), n > 0 {
            out += chunk[0..<n]
            if out.count > 1 << 20 { break }
        }
        return out
    }

    static func writeOut(_ s: String) {
        var bytes = Array(s.utf8)
        bytes.withUnsafeBytes { _ = try? SystemCall.writeAll(1, $0) }
        explicit_bzero(&bytes, bytes.count)
    }

    static func writeErr(_ s: String) {
        Array(s.utf8).withUnsafeBytes { _ = try? SystemCall.writeAll(2, $0) }
    }
}
