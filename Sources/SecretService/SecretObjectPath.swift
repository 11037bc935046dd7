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
        // Compared and cut as UTF-8 bytes: every call and every path GetSecrets names comes
        // through here, and Character-wise prefixes and splits cost more than the rest of a
        // call's parsing. A D-Bus object path is ASCII ([A-Za-z0-9_/]), so bytes are exact.
        let bytes = path.utf8
        if bytes.starts(with: SessionTable.pathPrefix.utf8) { self = .session(path); return }
        if bytes.starts(with: Self.promptPrefix.utf8) { self = .prompt(path); return }
        let isAlias: Bool
        if bytes.starts(with: Self.collectionPrefix.utf8) {
            isAlias = false
        } else if bytes.starts(with: Self.aliasPrefix.utf8) {
            isAlias = true
        } else {
            return nil
        }
        let start = bytes.index(bytes.startIndex, offsetBy: isAlias ? Self.aliasPrefix.utf8.count : Self.collectionPrefix.utf8.count)
        let slash = bytes[start...].firstIndex(of: UInt8(ascii: "/"))
        let first = String(path[start..<(slash ?? path.endIndex)])
        let collection: CollectionName
        if isAlias {
            guard !first.isEmpty, let target = try alias(first) else { return nil }
            collection = target
        } else {
            guard let name = CollectionName(name: first) else { return nil }
            collection = name
        }
        guard let slash else {
            self = .collection(collection)
            return
        }
        let id = path[bytes.index(after: slash)...]
        // One more element, not empty and without a further "/".
        guard !id.isEmpty, !id.utf8.contains(UInt8(ascii: "/")) else { return nil }
        self = .item(collection, id: String(id))
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
