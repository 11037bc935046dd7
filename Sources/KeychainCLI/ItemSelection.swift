import KeychainModel

/// Which items a command acts on. A bare `keychain delete` once deleted every item the caller
/// could see (exit 0, nothing said) and a bare `keychain get` printed some item's secret: get,
/// update and delete now need options that name items, and delete takes `--all` for everything.
enum ItemSelection {
    /// The options that name items. --class, --access-group and --synchronizable only narrow
    /// a selection: alone they still reach every item of a class, group or kind.
    static let naming = ["service", "account", "server", "protocol", "port", "path"]

    /// Throws unless the invocation names items, or (where `allowsAll`) says `--all` and
    /// names none.
    static func require(_ arguments: Arguments, allowsAll: Bool = false) throws(UsageError) {
        let named = naming.filter { arguments[$0] != nil }
        if allowsAll && arguments.has("all") {
            if let first = named.first {
                throw UsageError(message: "--all means every item: give it without --\(first), or drop --all to delete the matching items")
            }
            return
        }
        guard named.isEmpty else { return }
        throw UsageError(message: "`keychain \(arguments.spec.name)` needs --service and/or --account (internet passwords: --class internet-password with --server, --protocol, --port, --path or --account)"
                         + (allowsAll ? ", or --all to delete every item" : ""))
    }
}

extension Context {
    /// The queries of list and delete: without --class (and without --service, which only
    /// generic passwords have) both password classes, generic then internet, so that an
    /// internet password (git's, through git-credential-keychain) is not left out of sight.
    func passwordQueries() throws(UsageError) -> [AttributeDictionary] {
        let query = try itemQuery()
        guard arguments["class"] == nil, arguments["service"] == nil else { return [query] }
        var internet = query
        internet["class"] = .string("inet")
        return [query, internet]
    }

    /// Whether the command spans both password classes (its table then has a CLASS column).
    var spansPasswordClasses: Bool { arguments["class"] == nil && arguments["service"] == nil }
}
