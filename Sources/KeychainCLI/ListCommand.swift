import KeychainClient
import KeychainModel

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
             Accessible.name(ofPdmn: text(a["pdmn"])) + (a["sync"] == .int(1) ? " (synced)" : ""), text(a["labl"]), text(a["mdat"])]
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
