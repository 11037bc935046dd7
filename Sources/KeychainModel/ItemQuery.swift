/// kSecMatchLimit.
public enum MatchLimit: Sendable, Equatable {
    case one
    case all
    case count(Int)

    /// Limit one (including the number 1) returns a single object; anything else an array.
    public var returnsSingle: Bool {
        switch self {
        case .one: true
        case .count(let n): n == 1
        case .all: false
        }
    }

    public var maxRows: Int? {
        switch self {
        case .one: 1
        case .count(let n): n
        case .all: nil
        }
    }
}

/// A persistent reference: 4-byte class code + 16-byte row id, Apple's current format.
public struct PersistentRef: Sendable, Hashable {
    public let itemClass: ItemClass
    public let id: [UInt8]

    public init(itemClass: ItemClass, id: [UInt8]) {
        self.itemClass = itemClass
        self.id = id
    }

    public init?<C: Collection>(bytes: C) where C.Element == UInt8, C.Index == Int {
        guard bytes.count == 20,
              let code = String(validating: Array(bytes[0..<4]), as: UTF8.self),
              let cls = ItemClass(rawValue: code) else { return nil }
        self.itemClass = cls
        self.id = Array(bytes[4...])
    }

    public var bytes: [UInt8] { Array(itemClass.rawValue.utf8) + id }
}

/// Which SecItem call a dictionary is for: each accepts a different set of keys.
public enum ItemOperation: String, Sendable {
    case add, copyMatching, update, delete
}

/// A SecItem dictionary checked against Apple's key grammar (keychain-semantics.md 4.1) and
/// the class's attribute schema, with every attribute coerced to its stored form.
public struct ItemQuery: Sendable, Equatable {
    public var itemClass: ItemClass
    /// Class attributes given by the caller, coerced (agrp, pdmn and sync included when given).
    public var attributes: AttributeDictionary
    /// kSecAttrSynchronizable = kSecAttrSynchronizableAny ("syna"): no sync filter.
    public var matchesAnySync: Bool = false
    public var limit: MatchLimit = .one
    public var returnData = false
    public var returnAttributes = false
    public var returnRef = false
    public var returnPersistentRef = false
    /// kSecValueData.
    public var data: SecretBytes?
    /// kSecValuePersistentRef.
    public var persistentRef: PersistentRef?
    /// kSecAttrAccessControl, when given.
    public var accessControl: AccessControl?
    /// kSecUseAuthenticationUI (`u_AuthUI`, or `u_NoAuthUI` true for Fail).
    public var authenticationUI = AuthenticationUI.allow
    /// kSecUseOperationPrompt: the caller's reason, shown (escaped) in keychaind's prompt.
    public var operationPrompt: String?
    /// kSecUseCredentialReference (`u_CredRef`): an authentication context of the caller's
    /// connection (ops 49-52), which keychaind checks and uses before it would ask.
    public var credentialReference: [UInt8]?

    public var returnsAnything: Bool { returnData || returnAttributes || returnRef || returnPersistentRef }

    public var accessGroup: String? { attributes["agrp"]?.stringValue }
    public var protection: Protection? { attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)) }

    public init(itemClass: ItemClass, attributes: AttributeDictionary = [:]) {
        self.itemClass = itemClass
        self.attributes = attributes
    }

    /// Parses a caller's dictionary for `operation`, or throws the code Apple gives for it.
    public init(_ dict: AttributeDictionary, for operation: ItemOperation) throws(KeychainError) {
        guard dict.count <= KeychainLimits.maxQueryKeys else {
            throw .param("the dictionary has \(dict.count) keys; the limit is \(KeychainLimits.maxQueryKeys)")
        }
        var persistentRef: PersistentRef?
        if let v = dict["v_PersistentRef"] {
            guard operation != .add else {
                throw .param("v_PersistentRef names an existing item; it cannot be added")
            }
            guard case .data(let bytes) = v, let ref = PersistentRef(bytes: bytes) else {
                throw .param("v_PersistentRef must be the 20-byte data that r_PersistentRef returned")
            }
            persistentRef = ref
        }
        let cls: ItemClass
        switch dict["class"] {
        case nil:
            guard let ref = persistentRef else { throw .param("the query has no class (kSecClass)") }
            cls = ref.itemClass
        case .string(let s)?:
            guard let c = ItemClass(rawValue: s) else {
                throw KeychainError(.noSuchClass, "unknown class \"\(s)\"; use genp, inet, cert, keys or idnt")
            }
            if let ref = persistentRef, ref.itemClass != c {
                throw .param("class \(c.rawValue) does not match the persistent reference's class \(ref.itemClass.rawValue)")
            }
            cls = c
        case let v?:
            throw .param("class must be a string, not a \(v.typeName)")
        }
        self.init(itemClass: cls)
        self.persistentRef = persistentRef

        for (key, value) in dict where key != "class" && key != "v_PersistentRef" {
            try apply(key: key, value: value, operation: operation)
        }
        if let control = accessControl, operation == .add {
            attributes["pdmn"] = .string(try control.reconcile(with: attributes["pdmn"], synchronizable: attributes["sync"] == .int(1)).rawValue)
            if control.flags != 0 {
                try control.checkBuilt(for: itemClass)
                // Sealed with the item (ItemCodec): the blob's header and its attributes.
                attributes["accc"] = .string(control.stored)
            }
        }
        if operation == .add { try Self.checkSynchronizable(attributes) }
        if persistentRef != nil, operation == .copyMatching, !attributes.isEmpty {
            throw .param("a query with v_PersistentRef may not name other attributes")
        }
        if operation == .add, itemClass == .identity {
            throw .param("an identity is not stored: add its certificate (class cert) and its private key (class keys)")
        }
    }

    private mutating func apply(key: String, value: AttributeValue, operation: ItemOperation) throws(KeychainError) {
        if key.utf8.count == 4 && !key.contains("_") {
            try applyAttribute(code: key, value: value, operation: operation)
            return
        }
        switch key {
        case "v_Data":
            guard operation == .add || operation == .copyMatching else {
                throw .param("v_Data in the query of \(operation.rawValue) is not allowed; put the new secret in the attributes to update")
            }
            guard case .data(let d) = value else { throw .param("v_Data must be data, not a \(value.typeName)") }
            guard d.count <= KeychainLimits.maxSecretBytes else {
                throw .param("the secret is \(d.count) bytes; the limit is \(KeychainLimits.maxSecretBytes)")
            }
            // In a search, v_Data is not a filter (Apple: it is not a column); it is accepted.
            if operation == .add { data = d }
        case "r_Data", "r_Attributes", "r_Ref", "r_PersistentRef":
            guard case .bool(let on) = value else { throw .param("\(key) must be a boolean") }
            if operation == .update || operation == .delete {
                if on { throw .param("\(key) is not allowed in the query of \(operation.rawValue)") }
                return
            }
            switch key {
            case "r_Data": returnData = on
            case "r_Attributes": returnAttributes = on
            case "r_Ref": returnRef = on
            default: returnPersistentRef = on
            }
        case "m_Limit":
            guard operation == .copyMatching else {
                throw .param("m_Limit is not allowed in \(operation.rawValue): it acts on every match")
            }
            switch value {
            case .string("m_LimitOne"): limit = .one
            case .string("m_LimitAll"): limit = .all
            case .int(let n) where n >= 1: limit = .count(Int(min(n, Int64(Int32.max))))
            default: throw .param("m_Limit must be m_LimitOne, m_LimitAll or a positive number")
            }
        case "v_Ref":
            throw .param("v_Ref (object references) is not supported over a socket; pass attributes and v_Data")
        case "u_AuthUI":
            // Skip (leave out items that need authentication) is a search option: Apple's
            // client refuses it for every other call.
            switch value {
            case .string("u_AuthUIS"):
                guard operation == .copyMatching else {
                    throw .param("u_AuthUI = u_AuthUIS (skip items that need authentication) is only for copyMatching, not \(operation.rawValue)")
                }
                authenticationUI = .skip
            case .string("u_AuthUIF"): authenticationUI = .fail
            default: break  // Allow, the default
            }
        case "u_NoAuthUI":
            if value == .bool(true) || value == .int(1) { authenticationUI = .fail }
        case "u_OpPrompt":
            guard case .string(let reason) = value else { throw .param("u_OpPrompt must be a string") }
            operationPrompt = reason
        case "u_CredRef":
            guard case .data(let reference) = value, (1...64).contains(reference.count) else {
                throw .param("u_CredRef must be the 1 to 64 bytes of data contextCreate answered")
            }
            credentialReference = Array(reference)
        case "u_CallerName":
            // Apple's client takes it out of every call before it reaches securityd.
            break
        default:
            if key.hasPrefix("m_") {
                // kSecMatchCaseInsensitive and the like: accepted and without effect in a search (Apple too).
                guard operation == .copyMatching else {
                    throw .param("\(key) is not allowed in \(operation.rawValue)")
                }
            } else if key.hasPrefix("f_") {
                break
            } else if key.hasPrefix("r_") || key.hasPrefix("u_") || key.hasPrefix("v_") {
                throw .param("\(key) is not supported")
            } else {
                throw .param("unknown key \"\(key)\"")
            }
        }
    }

    private mutating func applyAttribute(code: String, value: AttributeValue, operation: ItemOperation) throws(KeychainError) {
        if code == "nleg" { return }  // kSecUseDataProtectionKeychain: always this keychain
        if code == "accc" {
            accessControl = try AccessControl(value)
            return
        }
        guard let spec = Self.spec(code, in: itemClass) else {
            throw KeychainError(.noSuchAttribute, "class \(itemClass.rawValue) has no attribute \(code)")
        }
        if code == "sync", case .string("syna") = value {
            guard operation != .add else { throw .param("sync = syna (any) is only for searches") }
            matchesAnySync = true
            return
        }
        attributes[code] = try Self.coerce(value, spec: spec)
    }

    /// A synchronizable item leaves the device, which a ThisDeviceOnly one never does: the
    /// combination is errSecParam (Apple documents it as not allowed). For an add, and for the
    /// attributes an update would leave an item with.
    public static func checkSynchronizable(_ attributes: AttributeDictionary) throws(KeychainError) {
        // Apple's rule for add holds for what an update leaves too: no constraint ever travels
        // to the circle's other devices.
        if attributes["sync"] == .int(1), AccessControl.storedFlags(attributes) != 0 {
            throw .param("a synchronizable item (sync = 1) cannot have access-control constraints")
        }
        guard attributes["sync"] == .int(1), let pdmn = attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)),
              pdmn.isThisDeviceOnly else { return }
        throw .param("a synchronizable item (sync = 1) cannot be \(pdmn.rawValue): ThisDeviceOnly items never leave this device")
    }

    static func spec(_ code: String, in cls: ItemClass) -> AttributeSpec? {
        if let schema = ClassSchema.of(cls) { return schema.spec(code) }
        // An identity accepts any certificate or key attribute.
        return ClassSchema.certificate.spec(code) ?? ClassSchema.key.spec(code)
    }

    /// Coerces one attribute value and checks the special ones (pdmn, agrp, sync) and sizes.
    static func coerce(_ value: AttributeValue, spec: AttributeSpec) throws(KeychainError) -> AttributeValue {
        let v = try spec.coerce(value)
        switch spec.code {
        case "pdmn":
            guard case .string(let s) = v, Protection(rawValue: s) != nil else {
                throw .param("pdmn must be one of ak, ck, dk, aku, cku, dku, akpu")
            }
        case "agrp":
            guard case .string(let s) = v, !s.isEmpty else { throw .param("agrp must be a non-empty string") }
        case "sync":
            guard case .int(let n) = v else { throw .param("sync must be a boolean, a number or syna") }
            return .int(n == 0 ? 0 : 1)
        case "xsat":
            // Stored and indexed as given, so only the canonical encoding is accepted.
            guard case .data(let d) = v else { throw .param("xsat must be data") }
            _ = try SecretServiceAttributes(encoded: Array(d))
        case "xsct":
            guard case .string(let s) = v, s.utf8.count <= 255 else { throw .param("xsct (a content type) must be a string of at most 255 bytes") }
        default: break
        }
        let size: Int
        switch v {
        case .string(let s): size = s.utf8.count
        case .data(let d): size = d.count
        default: size = 0
        }
        guard size <= KeychainLimits.maxAttributeBytes else {
            throw .param("attribute \(spec.code) is \(size) bytes; the limit is \(KeychainLimits.maxAttributeBytes)")
        }
        return v
    }
}

/// The second dictionary of SecItemUpdate: attributes and v_Data only.
public struct ItemChanges: Sendable, Equatable {
    public var attributes: AttributeDictionary = [:]
    public var data: SecretBytes?
    /// The `accc` the update gives, checked; nil: the item keeps its own constraint (under the
    /// new pdmn, if one is given).
    public private(set) var accessControl: AccessControl?

    public var isEmpty: Bool { attributes.isEmpty && data == nil }

    public init(attributes: AttributeDictionary = [:], data: SecretBytes? = nil) {
        self.attributes = attributes
        self.data = data
    }

    public init(_ dict: AttributeDictionary, for cls: ItemClass) throws(KeychainError) {
        guard dict.count <= KeychainLimits.maxQueryKeys else {
            throw .param("the attributes to update have \(dict.count) keys; the limit is \(KeychainLimits.maxQueryKeys)")
        }
        guard !dict.isEmpty else { throw .param("the attributes to update are empty") }
        for (key, value) in dict {
            if key == "v_Data" {
                guard case .data(let d) = value else { throw .param("v_Data must be data, not a \(value.typeName)") }
                guard d.count <= KeychainLimits.maxSecretBytes else {
                    throw .param("the secret is \(d.count) bytes; the limit is \(KeychainLimits.maxSecretBytes)")
                }
                data = d
                continue
            }
            if key == "nleg" { continue }
            if key == "accc" {
                accessControl = try AccessControl(value)
                continue
            }
            guard let spec = ItemQuery.spec(key, in: cls) else {
                throw KeychainError(.noSuchAttribute, "class \(cls.rawValue) has no attribute \(key) to update")
            }
            if key == "cdat" || key == "mdat" {
                // The keychain sets both dates itself (mdat now, cdat kept), as securityd does:
                // a date given here is checked like any attribute, then has no effect.
                _ = try ItemQuery.coerce(value, spec: spec)
                continue
            }
            if key == "sync", case .string("syna") = value {
                throw .param("sync = syna (any) is only for searches")
            }
            attributes[key] = try ItemQuery.coerce(value, spec: spec)
        }
        if let control = accessControl {
            attributes["pdmn"] = .string(try control.reconcile(with: attributes["pdmn"], synchronizable: attributes["sync"] == .int(1)).rawValue)
            // As in securityd, the new access control replaces the item's (SecItems.apply,
            // once the person allowed the update of an item that asks first).
            if control.flags != 0 { try control.checkBuilt(for: cls) }
        }
    }
}

/// kSecUseAuthenticationUI: what a call does when an item would need the person.
public enum AuthenticationUI: Sendable, Equatable {
    /// Ask (the default).
    case allow
    /// errSecInteractionNotAllowed instead of asking.
    case fail
    /// Leave such items out of a copyMatching's answer.
    case skip
}

/// kSecAttrAccessControl: a protection class plus optional constraints (Apple's
/// SecAccessControlCreateFlags). On the wire a string: the pdmn code, optionally followed by
/// `;` and the flags as a decimal number ("ak", "ak;1"). The flags are checked with Apple's
/// rules (docs/semantics.md); an item with userPresence or devicePasscode asks the person
/// before its secret is read (docs/security.md, "Items that ask first").
public struct AccessControl: Sendable, Equatable {
    public let protection: Protection
    public let flags: UInt32

    /// A protection class and flags as given (checked when an item is added with them).
    public init(protection: Protection, flags: UInt32 = 0) {
        self.protection = protection
        self.flags = flags
    }

    /// Apple's flag values (SecAccessControlCreateFlags).
    public enum Flag {
        public static let userPresence: UInt32 = 1 << 0
        public static let biometryAny: UInt32 = 1 << 1
        public static let biometryCurrentSet: UInt32 = 1 << 3
        public static let devicePasscode: UInt32 = 1 << 4
        public static let companion: UInt32 = 1 << 5
        public static let or: UInt32 = 1 << 14
        public static let and: UInt32 = 1 << 15
        public static let privateKeyUsage: UInt32 = 1 << 30
        public static let applicationPassword: UInt32 = 1 << 31

        public static let all: UInt32 = userPresence | biometryAny | biometryCurrentSet | devicePasscode | companion
            | or | and | privateKeyUsage | applicationPassword
        /// What needs a device this machine does not have (a fingerprint reader, a paired watch).
        public static let needsAbsentDevice: UInt32 = biometryAny | biometryCurrentSet | companion
    }

    /// The flags an item's sealed attributes hold (its `accc`); 0 without one.
    public static func storedFlags(_ attributes: AttributeDictionary) -> UInt32 {
        guard let value = attributes["accc"], let control = try? AccessControl(value) else { return 0 }
        return control.flags
    }

    /// Whether reading the secret needs the person: userPresence or devicePasscode (both
    /// mean the keychain passcode typed at keychaind's prompt; there is no other way here).
    public static func asksPerson(_ flags: UInt32) -> Bool { flags & (Flag.userPresence | Flag.devicePasscode) != 0 }

    /// Whether only the keychain passcode answers (devicePasscode, not satisfied by
    /// userPresence through Or): polkit's login password then does not count.
    public static func needsKeychainPasscode(_ flags: UInt32) -> Bool {
        flags & Flag.devicePasscode != 0 && (flags & Flag.userPresence == 0 || flags & Flag.and != 0)
    }

    /// The form kept in the item's attributes and returned in its results.
    public var stored: String { "\(protection.rawValue);\(flags)" }

    /// Whether the secret is sealed under the application password too (docs/security.md,
    /// "The application password"): needed to read it whatever Or and And say, since it is
    /// in the key, not a question asked.
    public static func needsApplicationPassword(_ flags: UInt32) -> Bool { flags & Flag.applicationPassword != 0 }

    /// What is not built yet of what Apple accepts: constraints on certificates. Keys take the
    /// rest: their use (sign, decrypt, agree) asks first, or needs the application password.
    func checkBuilt(for itemClass: ItemClass) throws(KeychainError) {
        guard itemClass == .genericPassword || itemClass == .internetPassword || itemClass == .key else {
            throw KeychainError(.unimplemented, "access-control constraints on \(itemClass.rawValue) items are not built yet (passwords and keys only)")
        }
    }

    public init(_ value: AttributeValue) throws(KeychainError) {
        guard case .string(let text) = value else {
            throw .param("accc must be a string: a pdmn code, optionally with ;flags (e.g. \"ak\" or \"ak;1\")")
        }
        let parts = text.split(separator: ";", omittingEmptySubsequences: false)
        guard parts.count <= 2, let p = Protection(rawValue: String(parts[0])) else {
            throw .param("accc must name a protection class (ak, ck, dk, aku, cku, dku, akpu), optionally with ;flags")
        }
        var parsed: UInt32 = 0
        if parts.count == 2 {
            guard let f = UInt32(parts[1]) else { throw .param("accc flags must be a decimal number") }
            parsed = f
        }
        protection = p
        flags = parsed
    }

    /// Apple's combination rules, in SecAccessControlCreateWithFlags's order: a flag Apple
    /// does not define, userPresence beside anything but applicationPassword and
    /// privateKeyUsage, and Or with And are errSecParam (-50). Biometry and the companion
    /// (watch) flags name devices that do not exist here: errSecNotAvailable (-25291), one
    /// code for all three.
    public func checkFlags() throws(KeychainError) {
        guard flags & ~Flag.all == 0 else {
            throw .param("accc flags \(flags) include bits that are no SecAccessControlCreateFlags (unknown: \(flags & ~Flag.all))")
        }
        if flags & Flag.userPresence != 0,
           flags & ~(Flag.userPresence | Flag.applicationPassword | Flag.privateKeyUsage) != 0 {
            throw .param("userPresence (1) combines only with applicationPassword and privateKeyUsage")
        }
        guard flags & Flag.or == 0 || flags & Flag.and == 0 else {
            throw .param("accc flags may hold Or (16384) or And (32768), not both")
        }
        guard flags & Flag.needsAbsentDevice == 0 else {
            throw KeychainError(.notAvailable, "biometry and companion-device (watch) constraints need a device this machine does not have; use userPresence or devicePasscode")
        }
    }

    /// The pdmn an item gets. pdmn and accc together must agree (same protection, no
    /// constraints), as in securityd; a synchronizable item has no constraints (Apple's
    /// errSecParam).
    func reconcile(with pdmn: AttributeValue?, synchronizable: Bool = false) throws(KeychainError) -> Protection {
        try checkFlags()
        if let pdmn {
            guard flags == 0, pdmn == .string(protection.rawValue) else {
                throw .param("conflicting kSecAttrAccessible (pdmn) and kSecAttrAccessControl (accc)")
            }
        }
        guard flags == 0 || !synchronizable else {
            throw .param("a synchronizable item (sync = 1) cannot have access-control constraints")
        }
        return protection
    }
}

/// One item's result, in the shapes SecItemCopyMatching returns (keychain-semantics.md 4.6).
public enum ItemResult: Sendable, Equatable {
    /// r_Data alone: the secret.
    case data(SecretBytes)

    /// A data result copied from ordinary bytes (tests, tools).
    public static func data(_ bytes: [UInt8]) -> ItemResult { .data(SecretBytes(bytes)) }
    /// r_PersistentRef alone.
    case persistentRef([UInt8])
    /// r_Attributes, or two or more return keys: attributes plus v_Data / v_PersistentRef.
    case attributes(AttributeDictionary)
}

/// The result of CopyMatching (and of Add with return keys).
public enum QueryResult: Sendable, Equatable {
    /// No return key was set, or only r_Ref for a password class (Apple returns NULL).
    case none
    /// Match limit one.
    case single(ItemResult)
    /// Any other match limit: an array, possibly of one.
    case list([ItemResult])
}
