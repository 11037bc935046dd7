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

    /// `alias` resolves an alias path's name (nil: no such alias). Without it, only the fixed
    /// aliases resolve (default and login to login, session to session).
    init?(_ path: String, alias: (String) throws -> CollectionName? = { CollectionName(fixedAlias: $0) }) rethrows {
        if path == Self.root { self = .service; return }
        if path.hasPrefix(SessionTable.pathPrefix) { self = .session(path); return }
        if path.hasPrefix(Self.promptPrefix) { self = .prompt(path); return }
        let parts: [Substring]
        let collection: CollectionName
        if path.hasPrefix(Self.collectionPrefix) {
            parts = path.dropFirst(Self.collectionPrefix.count).split(separator: "/", omittingEmptySubsequences: false)
            guard let name = CollectionName(name: String(parts[0])) else { return nil }
            collection = name
        } else if path.hasPrefix(Self.aliasPrefix) {
            parts = path.dropFirst(Self.aliasPrefix.count).split(separator: "/", omittingEmptySubsequences: false)
            guard !parts[0].isEmpty, let target = try alias(String(parts[0])) else { return nil }
            collection = target
        } else {
            return nil
        }
        switch parts.count {
        case 1: self = .collection(collection)
        case 2 where !parts[1].isEmpty: self = .item(collection, id: String(parts[1]))
        default: return nil
        }
    }
}

/// The collections there are: `login` (persistent, in keychaind; alias `default` unless a
/// client re-points it), `session` (in the bridge's memory) and the ones clients create
/// (persistent, in keychaind; CreatedCollections.swift), named `c` and the 32 hex digits of
/// their record's persistent id.
enum CollectionName: Hashable {
    case login
    case session
    case created(ItemID)

    /// A path element: login, session or c<32 hex>.
    init?(name: String) {
        switch name {
        case "login": self = .login
        case "session": self = .session
        default:
            guard name.first == "c", let id = ItemID(hex: String(name.dropFirst())) else { return nil }
            self = .created(id)
        }
    }

    /// The aliases that need no lookup (`login` too, as gnome-keyring does). `default` goes to
    /// login here; the bridge asks keychaind first whether a client re-pointed it.
    init?(fixedAlias alias: String) {
        switch alias {
        case "default", "login": self = .login
        case "session": self = .session
        default: return nil
        }
    }

    /// The path element, and the collection part of its items' svce ("secret-service:" + name).
    var name: String {
        switch self {
        case .login: "login"
        case .session: "session"
        case .created(let id): "c" + id.hex
        }
    }

    var path: String { SecretObjectPath.collectionPrefix + name }

    func itemPath(_ id: String) -> String { path + "/" + id }
}
