import KeychainClient
import KeychainModel

/// `keychain list`: the password items' attributes, never their secrets. Without --class it
/// shows both password classes with a CLASS column; the columns follow the class (an internet
/// password has a server, protocol, port and path, not a service). Keys and certificates have
/// `key list` and `cert list`. Every cell is escaped (ControlEscaping); JSON is not (its
/// strings are escaped by JSON itself).
enum ListCommand {
    static func run(_ c: Context) throws {
        let connection = try c.connection()
        var rows: [(internet: Bool, attributes: AttributeDictionary)] = []
        for var query in try c.passwordQueries() {
            query["r_Attributes"] = .bool(true)
            query["m_Limit"] = .string("m_LimitAll")
            let internet = query["class"] == .string("inet")
            rows += try matching(query, connection).map { (internet: internet, attributes: $0) }
        }
        if c.json {
            Output.line(JSON.array(rows.map(\.attributes)))
            return
        }
        let layout: Layout = c.spansPasswordClasses ? .both : c.isInternetPassword ? .internet : .generic
        let table = rows.map { layout.cells($0.attributes, internet: $0.internet).map(ControlEscaping.escaped) }
        let header = layout.header
        let widths = header.indices.map { i in ([header[i]] + table.map { $0[i] }).map(\.count).max()! }
        for row in [header] + table {
            // Trailing blanks cut: EXPIRES, the last column, is empty for most items.
            var line = row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell.padding(widths[i] + 1)
            }.joined(separator: " ")
            while line.last == " " { line.removeLast() }
            Output.line(line)
        }
    }

    /// The columns of one listing.
    enum Layout {
        case generic, internet, both

        var header: [String] {
            switch self {
            case .generic: ["SERVICE", "ACCOUNT", "GROUP", "ACCESSIBLE", "LABEL", "MODIFIED", "EXPIRES"]
            case .internet: ["SERVER", "PROTOCOL", "PORT", "PATH", "ACCOUNT", "GROUP", "ACCESSIBLE", "LABEL", "MODIFIED", "EXPIRES"]
            case .both: ["CLASS", "SERVICE/SERVER", "ACCOUNT", "GROUP", "ACCESSIBLE", "LABEL", "MODIFIED", "EXPIRES"]
            }
        }

        func cells(_ a: AttributeDictionary, internet: Bool) -> [String] {
            let text = ListCommand.text
            let common = [text(a["acct"]), text(a["agrp"]), accessible(a), text(a["labl"]), text(a["mdat"]), text(a["expd"])]
            switch self {
            case .generic: return [text(a["svce"])] + common
            case .internet: return [text(a["srvr"]), InternetProtocol.name(text(a["ptcl"])), port(a), text(a["path"])] + common
            case .both:
                return [internet ? "internet-password" : "generic-password", text(a[internet ? "srvr" : "svce"])] + common
            }
        }

        func accessible(_ a: AttributeDictionary) -> String {
            let asks = AccessControl(attributes: a).flatMap { $0.asksFirst || $0.flags != 0 ? $0 : nil }
            return Accessible.name(ofPdmn: ListCommand.text(a["pdmn"])) + (a["sync"] == .int(1) ? " (synced)" : "")
                + (asks.map { " (asks first: \(Requirement.describe($0)))" } ?? "")
        }

        /// 0 is "no port" in SecItem.
        func port(_ a: AttributeDictionary) -> String { a["port"] == .int(0) ? "" : ListCommand.text(a["port"]) }
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
