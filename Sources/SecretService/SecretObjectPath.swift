/// The objects the bridge serves, by path (spec §3; aliases behave exactly like their target).
enum SecretObjectPath: Equatable {
    case service
    case session(String)
    case collection(CollectionName)
    case item(CollectionName, id: String)
    case prompt(String)

    static let root = "/org/freedesktop/secrets"
    static let collectionPrefix = root + "/collection/"
    static let aliasPrefix = root + "/aliases/"
    static let promptPrefix = root + "/prompt/"

    init?(_ path: String) {
        if path == Self.root { self = .service; return }
        if path.hasPrefix(SessionTable.pathPrefix) { self = .session(path); return }
        if path.hasPrefix(Self.promptPrefix) { self = .prompt(path); return }
        let rest: Substring
        if path.hasPrefix(Self.collectionPrefix) {
            rest = path.dropFirst(Self.collectionPrefix.count)
        } else if path.hasPrefix(Self.aliasPrefix) {
            let tail = path.dropFirst(Self.aliasPrefix.count)
            let alias = tail.prefix { $0 != "/" }
            guard let target = CollectionName(alias: String(alias)) else { return nil }
            rest = Substring(target.rawValue) + tail.dropFirst(alias.count)
        } else {
            return nil
        }
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false)
        guard let first = parts.first, let collection = CollectionName(rawValue: String(first)) else { return nil }
        switch parts.count {
        case 1: self = .collection(collection)
        case 2 where !parts[1].isEmpty: self = .item(collection, id: String(parts[1]))
        default: return nil
        }
    }
}

/// The collections there are: `login` (persistent, in keychaind; alias `default`) and
/// `session` (in the bridge's memory).
enum CollectionName: String, CaseIterable {
    case login
    case session

    /// What ReadAlias and the alias paths resolve (`login` too, as gnome-keyring does).
    init?(alias: String) {
        switch alias {
        case "default", "login": self = .login
        case "session": self = .session
        default: return nil
        }
    }

    var path: String { SecretObjectPath.collectionPrefix + rawValue }

    func itemPath(_ id: String) -> String { path + "/" + id }
}
