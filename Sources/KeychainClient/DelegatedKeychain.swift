import KeychainModel
import KeychainProtocol

/// A process the Secret Service bridge speaks for: its pid and its start time (clock ticks
/// since boot, field 22 of /proc/PID/stat), which together name one process for ever, even
/// once the pid is reused.
public struct CallerIdentity: Sendable, Hashable {
    public let pid: Int32
    public let startTime: UInt64

    public init(pid: Int32, startTime: UInt64) {
        self.pid = pid
        self.startTime = startTime
    }
}

/// One Secret Service item as an attribute search lists it: enough to give its D-Bus path and
/// its Locked, Created and Modified properties without opening it.
public struct SecretServiceRow: Sendable, Hashable {
    /// The item's persistent reference (20 bytes: "genp" and its 16-byte id).
    public let persistentRef: [UInt8]
    /// Its protection class (pdmn code: "ck", "ak", ...).
    public let protection: String
    public let accessGroup: String
    /// Whether its class key is not loaded now (its attributes and secret are unavailable).
    public let locked: Bool
    /// Unix time (seconds since 1970), as the Secret Service's Created and Modified properties
    /// count (they take whole seconds).
    public let created: Double
    public let modified: Double

    public init(persistentRef: [UInt8], protection: String, accessGroup: String, locked: Bool,
                created: Double, modified: Double) {
        self.persistentRef = persistentRef
        self.protection = protection
        self.accessGroup = accessGroup
        self.locked = locked
        self.created = created
        self.modified = modified
    }

    /// A row of an attributeSearch answer.
    init(_ result: ItemResult) throws(KeychainError) {
        guard case .attributes(let d) = result,
              case .data(let ref)? = d["v_PersistentRef"], case .string(let pdmn)? = d["pdmn"],
              case .string(let agrp)? = d["agrp"], case .bool(let locked)? = d["locked"],
              case .date(let cdat)? = d["cdat"], case .date(let mdat)? = d["mdat"] else {
            throw Response.unexpected("attribute search")
        }
        self.init(persistentRef: Array(ref), protection: pdmn, accessGroup: agrp, locked: locked,
                  created: cdat + absoluteTimeIntervalSince1970, modified: mdat + absoluteTimeIntervalSince1970)
    }
}

extension KeychainConnection {
    /// The calls of this connection made on behalf of `caller` (the Secret Service bridge's
    /// D-Bus caller): keychaind checks the caller on /proc and decides each call by its
    /// groups, not the bridge's. Only a bridge named in keychaind's `bridge_executables` may
    /// make them (errSecMissingEntitlement otherwise).
    public func onBehalf(of caller: CallerIdentity) -> DelegatedKeychain {
        DelegatedKeychain(connection: self, caller: caller)
    }
}

/// SecItem and Secret Service calls sent for another process (op 16, asCaller). Errors as
/// `KeychainConnection`'s: the daemon's code for the caller, or errSecMissingEntitlement when
/// keychaind does not accept the bridge or the caller (another uid, exited, pid reused).
public struct DelegatedKeychain: Sendable {
    public let connection: KeychainConnection
    public let caller: CallerIdentity

    init(connection: KeychainConnection, caller: CallerIdentity) {
        self.connection = connection
        self.caller = caller
    }

    /// `call` sent for the caller: keychaind answers it as it would answer the caller.
    func perform<Answer>(_ call: KeychainCall<Answer>) throws(KeychainError) -> Answer {
        try connection.perform(call.onBehalf(of: caller))
    }

    /// SecItemAdd for the caller.
    @discardableResult
    public func add(_ attributes: AttributeDictionary) throws(KeychainError) -> QueryResult { try perform(Calls.add(attributes)) }

    /// SecItemCopyMatching for the caller.
    public func copyMatching(_ query: AttributeDictionary) throws(KeychainError) -> QueryResult { try perform(Calls.copyMatching(query)) }

    /// SecItemUpdate for the caller.
    public func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) throws(KeychainError) {
        try perform(Calls.update(query, changes))
    }

    /// SecItemDelete for the caller.
    public func delete(_ query: AttributeDictionary) throws(KeychainError) { try perform(Calls.delete(query)) }

    /// keychaind's status as the caller sees it (`groups` are the caller's).
    public func status() throws(KeychainError) -> AttributeDictionary { try perform(Calls.status) }

    /// Admin calls: the caller's uid must be an admin.
    public func lock() throws(KeychainError) { try perform(Calls.lock) }
    public func unlock(passcode: SecretBytes) throws(KeychainError) { try perform(Calls.unlock(passcode: passcode)) }

    /// Secret Service items of `collection` in the caller's groups holding every pair of
    /// `pairs` (`exact`: exactly that set), locked ones included. Empty when none match.
    public func attributeSearch(collection: String, exact: Bool, pairs: SecretServiceAttributes) throws(KeychainError) -> [SecretServiceRow] {
        let items = try perform(Calls.list(.attributeSearch(collection: collection, exact: exact, pairs: pairs), "attribute search"))
        return try items.map { (item) throws(KeychainError) in try SecretServiceRow(item) }
    }

    /// Adds a Secret Service item: `attributes` holds class genp, svce
    /// "secret-service:<collection>", xsat, and optionally labl, xsct, v_Data, agrp, pdmn.
    /// With `replace`, the caller's first item of that collection with exactly the same xsat
    /// gets the new label, content type and secret instead (`replaced` is then true).
    public func attributeAdd(_ attributes: AttributeDictionary, replace: Bool) throws(KeychainError) -> (persistentRef: [UInt8], replaced: Bool) {
        let d = try perform(Calls.attributes(.attributeAdd(attributes, replace: replace), "attributeAdd"))
        guard case .data(let ref)? = d["v_PersistentRef"], case .bool(let replaced)? = d["replaced"] else {
            throw Response.unexpected("attributeAdd")
        }
        return (Array(ref), replaced)
    }

    /// The secrets of several Secret Service items in one call (op 48): persistent reference →
    /// (svce, content type, secret). Items the caller cannot read now are not in the answer.
    public func attributeSecrets(_ refs: [[UInt8]]) throws(KeychainError) -> [[UInt8]: (service: String, contentType: String, secret: SecretBytes)] {
        var found: [[UInt8]: (service: String, contentType: String, secret: SecretBytes)] = [:]
        for item in try perform(Calls.list(.attributeSecrets(refs: refs), "attribute secrets")) {
            guard case .attributes(let d) = item, case .data(let ref)? = d["v_PersistentRef"], case .string(let svce)? = d["svce"],
                  case .data(let secret)? = d["v_Data"] else { throw Response.unexpected("attribute secrets") }
            found[Array(ref)] = (svce, d["xsct"]?.stringValue ?? "text/plain", secret)
        }
        return found
    }

    /// The sandboxed app `appID`'s secret, made on first use (the portal's RetrieveSecret).
    public func portalSecret(appID: String) throws(KeychainError) -> SecretBytes {
        try perform(Calls.data(.portalSecret(appID: appID), "portal secret"))
    }
}
