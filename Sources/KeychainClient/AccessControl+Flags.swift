import KeychainModel

// The client's face of kSecAttrAccessControl. The value itself is KeychainModel's
// `AccessControl` (the daemon parses and checks the same type), so a client and keychaind
// cannot disagree about what "ak;1" means; this adds what SecAccessControlCreateWithFlags
// gives an app: named flags, a checked constructor, and the item's value read back.
//
//     let control = try AccessControl(protection: .whenUnlocked, flags: .userPresence)
//     try connection.add(["class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"),
//                         "accc": control.attributeValue, "v_Data": .data(token)])
//     AccessControl(attributes: found)?.asksFirst   // true: reading the secret asks the person
extension AccessControl {
    /// SecAccessControlCreateFlags, with Apple's names and raw values.
    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }

        /// The keychain passcode typed at keychaind's prompt (there is no biometry here).
        public static let userPresence = Flags(rawValue: Flag.userPresence)
        /// No such device here: refused with errSecNotAvailable.
        public static let biometryAny = Flags(rawValue: Flag.biometryAny)
        /// No such device here: refused with errSecNotAvailable.
        public static let biometryCurrentSet = Flags(rawValue: Flag.biometryCurrentSet)
        /// The keychain passcode typed at keychaind's prompt.
        public static let devicePasscode = Flags(rawValue: Flag.devicePasscode)
        /// No such device here: refused with errSecNotAvailable.
        public static let watch = Flags(rawValue: Flag.companion)
        public static let companion = Flags(rawValue: Flag.companion)
        public static let or = Flags(rawValue: Flag.or)
        public static let and = Flags(rawValue: Flag.and)
        public static let privateKeyUsage = Flags(rawValue: Flag.privateKeyUsage)
        /// The secret (a key's private bytes) sealed under the application password of the
        /// call's AuthenticationContext (setApplicationPassword), needed again for each use.
        public static let applicationPassword = Flags(rawValue: Flag.applicationPassword)
    }

    /// SecAccessControlCreateWithFlags: `protection` with `flags`, refused here with the code
    /// keychaind would give (errSecParam for a combination Apple refuses, errSecNotAvailable
    /// for biometry and companion devices), so a bad value fails before any secret is sent.
    public init(protection: Protection, flags: Flags = []) throws(KeychainError) {
        try self.init(.string(flags.isEmpty ? protection.rawValue : "\(protection.rawValue);\(flags.rawValue)"))
        try checkFlags()
    }

    /// The access control of an item in a result's attributes (`r_Attributes`): its `accc`,
    /// else its protection class with no constraints; nil when the dictionary has neither.
    public init?(attributes: AttributeDictionary) {
        if let accc = attributes["accc"], let control = try? AccessControl(accc) {
            self = control
        } else if case .string(let pdmn)? = attributes["pdmn"], Protection(rawValue: pdmn) != nil,
                  let control = try? AccessControl(.string(pdmn)) {
            self = control
        } else {
            return nil
        }
    }

    /// The constraints, by Apple's names.
    public var constraints: Flags { Flags(rawValue: flags) }

    /// Whether reading the item's secret asks the person at the machine first.
    public var asksFirst: Bool { AccessControl.asksPerson(flags) }

    /// The `accc` value of an add or update dictionary.
    public var attributeValue: AttributeValue { .string(flags == 0 ? protection.rawValue : stored) }

    /// An add's or update's `accc` checked with keychaind's rules, in its order, before the
    /// request leaves: the flags, `pdmn` beside constraints, and constraints on a
    /// synchronizable item (Apple's client refuses that one itself). keychaind checks again and
    /// stays the judge; this only saves sending a secret that would be refused.
    static func checkRequest(_ attributes: AttributeDictionary) throws(KeychainError) {
        guard let value = attributes["accc"] else { return }
        let control = try AccessControl(value)
        try control.checkFlags()
        if let pdmn = attributes["pdmn"], control.flags != 0 || pdmn != .string(control.protection.rawValue) {
            throw .param("conflicting kSecAttrAccessible (pdmn) and kSecAttrAccessControl (accc)")
        }
        if control.flags != 0, attributes["sync"] == .int(1) || attributes["sync"] == .bool(true) {
            throw .param("a synchronizable item (sync = 1) cannot have access-control constraints")
        }
    }
}
