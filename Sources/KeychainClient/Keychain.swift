import KeychainModel

/// The typed layer for the common case: secrets of one service, named by key (the account),
/// as bytes or strings.
///
///     let keychain = Keychain(service: "api.example.com")
///     try keychain.set("token", forKey: "alice")
///     let token = try keychain.string(forKey: "alice")   // "token", or nil if absent
public struct Keychain: Sendable {
    /// kSecAttrAccessible, by the names people know (.whenUnlocked, .afterFirstUnlock, ...).
    public typealias Accessibility = Protection

    public let service: String
    /// nil: the caller's default group.
    public let accessGroup: String?
    public let accessibility: Accessibility
    public let connection: KeychainConnection

    public init(service: String, accessGroup: String? = nil, accessibility: Accessibility = .whenUnlocked,
                connection: KeychainConnection = KeychainConnection()) {
        self.service = service
        self.accessGroup = accessGroup
        self.accessibility = accessibility
        self.connection = connection
    }

    /// A copy with another accessibility for the next `set`.
    public func accessibility(_ a: Accessibility) -> Keychain {
        Keychain(service: service, accessGroup: accessGroup, accessibility: a, connection: connection)
    }

    private func query(_ key: String? = nil) -> AttributeDictionary {
        var q: AttributeDictionary = ["class": .string("genp"), "svce": .string(service)]
        if let key { q["acct"] = .string(key) }
        if let accessGroup { q["agrp"] = .string(accessGroup) }
        return q
    }

    private func secretQuery(_ key: String) -> AttributeDictionary {
        var q = query(key)
        q["r_Data"] = .bool(true)
        return q
    }

    private static func secret(in result: QueryResult) -> [UInt8]? {
        guard case .single(.data(let d)) = result else { return nil }
        return Array(d)
    }

    private static func text(_ secret: [UInt8]?, key: String) throws(KeychainError) -> String? {
        guard let secret else { return nil }
        guard let s = String(validating: secret, as: UTF8.self) else {
            throw KeychainError(.decode, "the secret for \(key) is not UTF-8 text; read it as data")
        }
        return s
    }

    private func newItem(_ value: [UInt8], forKey key: String) -> AttributeDictionary {
        var item = query(key)
        item.merge(replacement(value)) { $1 }
        return item
    }

    private func replacement(_ value: [UInt8]) -> AttributeDictionary {
        ["v_Data": .data(value), "pdmn": .string(accessibility.rawValue)]
    }

    /// The secret for `key`, or nil when there is none.
    public func data(forKey key: String) throws(KeychainError) -> [UInt8]? {
        do {
            return Self.secret(in: try connection.copyMatching(secretQuery(key)))
        } catch where error.status == .itemNotFound {
            return nil
        }
    }

    /// The secret for `key` as UTF-8 text; errSecDecode if it is not valid UTF-8.
    public func string(forKey key: String) throws(KeychainError) -> String? {
        try Self.text(try data(forKey: key), key: key)
    }

    /// Stores `value` under `key`, replacing what was there (and its accessibility).
    public func set(_ value: [UInt8], forKey key: String) throws(KeychainError) {
        do {
            try connection.add(newItem(value, forKey: key))
        } catch where error.status == .duplicateItem {
            try connection.update(query(key), replacement(value))
        }
    }

    public func set(_ value: String, forKey key: String) throws(KeychainError) {
        try set(Array(value.utf8), forKey: key)
    }

    /// Removes `key`; no error if it was not there.
    public func remove(forKey key: String) throws(KeychainError) {
        do {
            try connection.delete(query(key))
        } catch where error.status == .itemNotFound {}
    }

    /// Removes every key of this service.
    public func removeAll() throws(KeychainError) {
        do {
            try connection.delete(query())
        } catch where error.status == .itemNotFound {}
    }

    public func contains(_ key: String) throws(KeychainError) -> Bool {
        do {
            _ = try connection.copyMatching(query(key))
            return true
        } catch where error.status == .itemNotFound {
            return false
        }
    }

    private func keysQuery() -> AttributeDictionary {
        var q = query()
        q["r_Attributes"] = .bool(true)
        q["m_Limit"] = .string("m_LimitAll")
        return q
    }

    /// Every key (account) of this service.
    public func allKeys() throws(KeychainError) -> [String] {
        do {
            return Self.keys(in: try connection.copyMatching(keysQuery()))
        } catch where error.status == .itemNotFound {
            return []
        }
    }

    private static func keys(in result: QueryResult) -> [String] {
        guard case .list(let items) = result else { return [] }
        return items.compactMap { item in
            guard case .attributes(let a) = item else { return nil }
            switch a["acct"] {
            case .string(let s)?: return s
            case .data(let d)?: return String(validating: d, as: UTF8.self)
            default: return nil
            }
        }
    }
}

// The same calls for async code: each waits for keychaind without holding a thread of the
// cooperative pool, and ends with errSecUserCanceled when its Task is cancelled
// (KeychainConnection's async calls).
extension Keychain {
    public func data(forKey key: String) async throws(KeychainError) -> [UInt8]? {
        do {
            return Self.secret(in: try await connection.copyMatching(secretQuery(key)))
        } catch where error.status == .itemNotFound {
            return nil
        }
    }

    public func string(forKey key: String) async throws(KeychainError) -> String? {
        try Self.text(try await data(forKey: key), key: key)
    }

    public func set(_ value: [UInt8], forKey key: String) async throws(KeychainError) {
        do {
            try await connection.add(newItem(value, forKey: key))
        } catch where error.status == .duplicateItem {
            try await connection.update(query(key), replacement(value))
        }
    }

    public func set(_ value: String, forKey key: String) async throws(KeychainError) {
        try await set(Array(value.utf8), forKey: key)
    }

    public func remove(forKey key: String) async throws(KeychainError) {
        do {
            try await connection.delete(query(key))
        } catch where error.status == .itemNotFound {}
    }

    public func removeAll() async throws(KeychainError) {
        do {
            try await connection.delete(query())
        } catch where error.status == .itemNotFound {}
    }

    public func contains(_ key: String) async throws(KeychainError) -> Bool {
        do {
            _ = try await connection.copyMatching(query(key))
            return true
        } catch where error.status == .itemNotFound {
            return false
        }
    }

    public func allKeys() async throws(KeychainError) -> [String] {
        do {
            return Self.keys(in: try await connection.copyMatching(keysQuery()))
        } catch where error.status == .itemNotFound {
            return []
        }
    }
}
