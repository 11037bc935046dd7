#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// git's credential-helper protocol (gitcredentials(7), git-credential(1)) over keychaind.
///
/// A credential is an internet-password item in the caller's default access group: server
/// (`host` without its port), protocol, port, path (sent by git only with
/// credential.useHttpPath), account (`username`), the password as the secret, the expiry in
/// the comment. An OAuth refresh token is a second item with the same identity and
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

    /// The identity of the credential git describes; nil when git gave no host (nothing to
    /// look for, e.g. a local path).
    func identity(_ fields: [String: String], authType: String = "dflt") -> AttributeDictionary? {
        guard let hostField = fields["host"], !hostField.isEmpty else { return nil }
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
            "ptcl": .string(InternetProtocol.code(fields["protocol"] ?? "")),
            "path": .string(fields["path"] ?? ""), "atyp": .string(authType),
        ]
        if let user = fields["username"] { item["acct"] = .string(user) }
        return item
    }

    /// `get`: the matching credential as git's lines, or nothing.
    public func get(_ fields: [String: String]) -> String {
        guard let query = identity(fields) else { return "" }
        do {
            var q = query
            q["r_Attributes"] = .bool(true)
            q["r_Data"] = .bool(true)
            guard case .single(.attributes(let found)) = try connection.copyMatching(q),
                  case .data(let password)? = found["v_Data"],
                  let passwordText = String(validating: password, as: UTF8.self) else { return "" }
            var out = ""
            if case .string(let user)? = found["acct"] { out += "username=\(user)\n" }
            out += "password=\(passwordText)\n"
            if case .string(let expiry)? = found["icmt"], Int64(expiry) != nil {
                out += "password_expiry_utc=\(expiry)\n"
            }
            if let token = try refreshToken(found) { out += "oauth_refresh_token=\(token)\n" }
            return out
        } catch {
            quietly(error)
            return ""
        }
    }

    private func refreshToken(_ found: AttributeDictionary) throws(KeychainError) -> String? {
        var q: AttributeDictionary = ["class": .string("inet"), "atyp": .string("oaut"), "r_Data": .bool(true)]
        for code in ["srvr", "ptcl", "port", "path", "acct"] { q[code] = found[code] }
        do {
            guard case .single(.data(let token)) = try connection.copyMatching(q) else { return nil }
            return String(validating: token, as: UTF8.self)
        } catch where error.status == .itemNotFound {
            return nil
        }
    }

    /// `store`: adds or replaces the credential (and its refresh token, if git sent one).
    public func store(_ fields: [String: String]) {
        guard var item = identity(fields), fields["username"] != nil, let password = fields["password"] else { return }
        var changes: AttributeDictionary = ["v_Data": .data(Array(password.utf8)),
                                            "labl": .string("git: \(fields["host"] ?? "")")]
        if let expiry = fields["password_expiry_utc"], Int64(expiry) != nil { changes["icmt"] = .string(expiry) }
        do {
            try upsert(item, changes)
            if let token = fields["oauth_refresh_token"] {
                item["atyp"] = .string("oaut")
                try upsert(item, ["v_Data": .data(Array(token.utf8)), "labl": .string("git refresh token: \(fields["host"] ?? "")")])
            }
        } catch {
            quietly(error)
        }
    }

    private func upsert(_ identity: AttributeDictionary, _ changes: AttributeDictionary) throws(KeychainError) {
        do {
            try connection.add(identity.merging(changes) { $1 })
        } catch where error.status == .duplicateItem {
            try connection.update(identity, changes)
        }
    }

    /// `erase`: removes the matching credential and its refresh token. When git names the
    /// password (it does since 2.40) only a credential with that password is erased, so a
    /// credential stored since by another process survives.
    public func erase(_ fields: [String: String]) {
        guard let query = identity(fields) else { return }
        do {
            if let password = fields["password"] {
                var q = query
                q["r_Data"] = .bool(true)
                guard case .single(.data(let stored)) = try connection.copyMatching(q), stored == SecretBytes(password.utf8) else { return }
            }
            try? connection.delete(query)
            var token = query
            token["atyp"] = .string("oaut")
            try? connection.delete(token)
        } catch {
            quietly(error)
        }
    }

    /// A failure never reaches git's standard output: git then asks the user, as without a
    /// helper. A hint goes to standard error.
    private func quietly(_ error: KeychainError) {
        switch error.status {
        case .itemNotFound: break
        case .interactionNotAllowed: warn("keychain: locked; run `keychain unlock` to use stored git credentials")
        case .serviceNotAvailable: warn("keychain: keychaind is not reachable; git credentials are not stored or read")
        default: warn("keychain: \(error.message)")
        }
    }

    /// Runs the helper for git: `action` is get, store or erase; reads standard input.
    /// `[--trust-uid UID] ACTION`: git passes what follows the helper's name in
    /// credential.helper, so `keychain --trust-uid 995` trusts a daemon running as uid 995.
    public static func main(arguments: [String]) -> Int32 {
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

    static func usage() -> Int32 {
        writeErr("usage: git-credential-keychain [--trust-uid UID] get|store|erase (git runs it; see docs/git-credential.md)\n")
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
