#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel

/// The collection `session` (design 1.7): items in the bridge's memory only, gone when it
/// exits. Each belongs to the access group its creator had first, and only callers holding
/// that group see it, so apps the config separates stay apart here too. Indexed by pair and
/// by whole set, so searches cost what keychaind's index costs, not a scan.
struct SessionCollection {
    static let maxItems = 1024
    /// What all items may hold together: secrets, labels, attributes and content types, so
    /// that no field a client sends can grow the bridge without bound.
    static let maxBytes = 16 << 20
    /// One app's (executable's) share of each, so that its flood leaves room for the others.
    static let maxItemsPerApp = 256
    static let maxBytesPerApp = 4 << 20

    struct Item {
        let group: String
        /// The executable that created it, whose share it counts against.
        let app: ExecutableStamp
        var label: String
        var attributes: SecretServiceAttributes
        var contentType: String
        var secret: SecretBytes
        let created: UInt64
        var modified: UInt64

        /// The bytes it holds, as counted against `maxBytes`.
        var size: Int { secret.count + label.utf8.count + attributes.encoded.count + contentType.utf8.count }

        /// The limits one item of keychaind has (a secret of 1 MiB, a label of 64 KiB), so that
        /// an item is no larger here than in the login collection.
        func checkLimits() throws(KeychainError) {
            guard secret.count <= KeychainLimits.maxSecretBytes else {
                throw KeychainError(.param, "the secret is \(secret.count) bytes; the limit is \(KeychainLimits.maxSecretBytes)")
            }
            guard label.utf8.count <= KeychainLimits.maxAttributeBytes else {
                throw KeychainError(.param, "the label is \(label.utf8.count) bytes; the limit is \(KeychainLimits.maxAttributeBytes)")
            }
        }
    }

    private(set) var items: [String: Item] = [:]
    private var byPair: [String: Set<String>] = [:]
    private var heldBytes = 0
    private var held: [ExecutableStamp: (items: Int, bytes: Int)] = [:]

    var isEmpty: Bool { items.isEmpty }

    /// Ids of the items visible to `groups` holding every pair (`exact`: exactly the set),
    /// oldest first.
    func search(_ pairs: SecretServiceAttributes, exact: Bool = false, groups: [String]) -> [String] {
        var candidates: Set<String>
        if let first = pairs.pairs.first {
            // Drive by the rarest pair.
            let sets = pairs.pairs.map { byPair[Self.key($0.name, $0.value)] ?? [] }
            candidates = sets.min { $0.count < $1.count } ?? byPair[Self.key(first.name, first.value)] ?? []
        } else {
            candidates = Set(items.keys)
        }
        return candidates.compactMap { id -> (String, Item)? in
            guard let item = items[id], groups.contains(item.group),
                  exact ? item.attributes == pairs : item.attributes.contains(pairs) else { return nil }
            return (id, item)
        }.sorted { ($0.1.created, $0.0) < ($1.1.created, $1.0) }.map(\.0)
    }

    /// The item `id` if `groups` may see it; else NoSuchObject (a foreign item is not there).
    func item(_ id: String, groups: [String]) throws(KeychainError) -> Item {
        guard let item = items[id], groups.contains(item.group) else {
            throw KeychainError(.itemNotFound, "there is no such item in the collection session")
        }
        return item
    }

    /// CreateItem: a new item in the caller's first group, or with `replace` the caller's
    /// oldest item with exactly these attributes rewritten.
    mutating func create(label: String, attributes: SecretServiceAttributes, contentType: String, secret: SecretBytes,
                         replace: Bool, groups: [String], app: ExecutableStamp) throws(KeychainError) -> (id: String, replaced: Bool) {
        guard let group = groups.first else {
            throw KeychainError(.missingEntitlement, "keychaind gives this caller no access group")
        }
        let now = UInt64(Date().timeIntervalSince1970)
        if replace, let id = search(attributes, exact: true, groups: groups).first, var item = items[id] {
            let before = item.size
            item.label = label
            item.contentType = contentType
            item.secret = secret
            item.modified = now
            try item.checkLimits()
            try reserve(item.size - before, items: 0, app: item.app)
            items[id] = item
            return (id, true)
        }
        let item = Item(group: group, app: app, label: label, attributes: attributes, contentType: contentType, secret: secret,
                        created: now, modified: now)
        try item.checkLimits()
        try reserve(item.size, items: 1, app: app)
        var random = [UInt8](repeating: 0, count: 16)
        arc4random_buf(&random, random.count)
        let id = "s" + random.map { String(format: "%02x", $0) }.joined()
        items[id] = item
        index(id, attributes)
        return (id, false)
    }

    mutating func update(_ id: String, groups: [String], _ change: (inout Item) -> Void) throws(KeychainError) {
        var item = try item(id, groups: groups)
        let before = item
        change(&item)
        try item.checkLimits()
        try reserve(item.size - before.size, items: 0, app: item.app)
        item.modified = UInt64(Date().timeIntervalSince1970)
        unindex(id, before.attributes)
        items[id] = item
        index(id, item.attributes)
    }

    mutating func delete(_ id: String, groups: [String]) throws(KeychainError) {
        let item = try item(id, groups: groups)
        unindex(id, item.attributes)
        heldBytes -= item.size
        held[item.app, default: (0, 0)].items -= 1
        held[item.app, default: (0, 0)].bytes -= item.size
        if held[item.app]?.items == 0 { held[item.app] = nil }
        items[id] = nil
    }

    private mutating func reserve(_ bytes: Int, items count: Int, app: ExecutableStamp) throws(KeychainError) {
        let share = held[app] ?? (0, 0)
        guard share.items + count <= Self.maxItemsPerApp else {
            throw KeychainError(.allocate, "an app (one executable) may hold at most \(Self.maxItemsPerApp) items in the session collection")
        }
        guard share.bytes + bytes <= Self.maxBytesPerApp else {
            throw KeychainError(.allocate, "an app's items in the session collection would pass \(Self.maxBytesPerApp >> 20) MiB")
        }
        guard items.count + count <= Self.maxItems else {
            throw KeychainError(.allocate, "the session collection holds \(Self.maxItems) items already")
        }
        guard heldBytes + bytes <= Self.maxBytes else {
            throw KeychainError(.allocate, "the session collection's items would pass \(Self.maxBytes >> 20) MiB")
        }
        heldBytes += bytes
        held[app] = (share.items + count, share.bytes + bytes)
    }

    private mutating func index(_ id: String, _ attributes: SecretServiceAttributes) {
        for pair in attributes.pairs { byPair[Self.key(pair.name, pair.value), default: []].insert(id) }
    }

    private mutating func unindex(_ id: String, _ attributes: SecretServiceAttributes) {
        for pair in attributes.pairs {
            let key = Self.key(pair.name, pair.value)
            byPair[key]?.remove(id)
            if byPair[key]?.isEmpty == true { byPair[key] = nil }
        }
    }

    /// Names hold no NUL (a{ss} strings cannot), so this separates name from value.
    private static func key(_ name: String, _ value: String) -> String { name + "\u{0}" + value }
}
