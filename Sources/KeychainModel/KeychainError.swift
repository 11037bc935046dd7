/// The OSStatus codes that the keychain returns, with Apple's values so that people who know
/// SecItem recognise them (shared/reference/keychain-semantics.md, section 5).
public enum KeychainStatus: Int32, Sendable, CaseIterable, CustomStringConvertible {
    case success = 0
    case unimplemented = -4
    case io = -36
    case param = -50
    case allocate = -108
    case notAvailable = -25291
    case readOnly = -25292
    case authFailed = -25293
    case duplicateItem = -25299
    case itemNotFound = -25300
    case noSuchAttribute = -25303
    case noSuchClass = -25306
    case interactionNotAllowed = -25308
    case decode = -26275
    case `internal` = -26276
    case missingEntitlement = -34018
    /// errSecServiceNotAvailable: the client cannot reach keychaind (not running, wrong socket
    /// path, or the connection broke).
    case serviceNotAvailable = -67585
    /// errSecUserCanceled: the caller gave up on the call (an async call whose Task was
    /// cancelled); the daemon may or may not have carried out a write. Last, so that adding it
    /// moved no other case: a module built against the older list still agrees with this one.
    case userCanceled = -128
    /// errSecUnknownFormat: a certificate's bytes are not one DER X.509 certificate.
    case unknownFormat = -25257

    /// Apple's constant name, for messages and for people searching the code they see.
    public var name: String {
        switch self {
        case .success: "errSecSuccess"
        case .unimplemented: "errSecUnimplemented"
        case .io: "errSecIO"
        case .param: "errSecParam"
        case .allocate: "errSecAllocate"
        case .notAvailable: "errSecNotAvailable"
        case .readOnly: "errSecReadOnly"
        case .authFailed: "errSecAuthFailed"
        case .duplicateItem: "errSecDuplicateItem"
        case .itemNotFound: "errSecItemNotFound"
        case .noSuchAttribute: "errSecNoSuchAttr"
        case .noSuchClass: "errSecNoSuchClass"
        case .interactionNotAllowed: "errSecInteractionNotAllowed"
        case .decode: "errSecDecode"
        case .internal: "errSecInternal"
        case .missingEntitlement: "errSecMissingEntitlement"
        case .serviceNotAvailable: "errSecServiceNotAvailable"
        case .userCanceled: "errSecUserCanceled"
        case .unknownFormat: "errSecUnknownFormat"
        }
    }

    public var description: String { "\(name) (\(rawValue))" }
}

/// The one error type of the keychain. Equality is on the status code only, so tests and
/// callers match on what happened, not on the wording. Messages never carry secret bytes:
/// they name attributes and limits, not values.
public struct KeychainError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: KeychainStatus
    public let message: String
    /// What a lower layer reported, in its own terms (SQLite's result code for a storage
    /// failure), so that code can tell causes apart without reading the message. Stays in
    /// the process: the wire carries the status and the message only.
    public let underlying: (any Error & Sendable)?

    public init(_ status: KeychainStatus, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.status = status
        self.message = message
        self.underlying = underlying
    }

    public static func == (lhs: KeychainError, rhs: KeychainError) -> Bool {
        lhs.status == rhs.status
    }

    public var description: String { "\(status): \(message)" }

    public static func param(_ message: String) -> KeychainError { .init(.param, message) }
}
