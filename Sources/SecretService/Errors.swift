import KeychainModel

/// The D-Bus error a Secret Service call ends with: the bus-facing form of a KeychainError
/// (one table, `init(_:)`), or one of the bridge's own conditions (no session, unsupported
/// algorithm, ...), which have no OSStatus. Messages never carry secrets or attribute values.
struct BusErrorReply: Error, Sendable, Equatable, CustomStringConvertible {
    let name: String
    let message: String

    init(name: String, _ message: String) {
        self.name = name
        self.message = message
    }

    /// keychaind's status → the D-Bus error clients of the Secret Service know
    /// (docs/secret-service.md, "Errors").
    init(_ error: KeychainError) {
        let name: String = switch error.status {
        // A foreign group's item is indistinguishable from a missing one, on purpose.
        case .itemNotFound: Self.noSuchObjectName
        case .interactionNotAllowed: Self.isLockedName
        case .missingEntitlement: Self.accessDeniedName
        case .param, .noSuchAttribute: Self.invalidArgsName
        case .allocate: Self.limitsExceededName
        default: Self.failedName
        }
        self.init(name: name, error.message)
    }

    var description: String { "\(name): \(message)" }

    static let noSuchObjectName = "org.freedesktop.Secret.Error.NoSuchObject"
    static let isLockedName = "org.freedesktop.Secret.Error.IsLocked"
    static let noSessionName = "org.freedesktop.Secret.Error.NoSession"
    static let accessDeniedName = "org.freedesktop.DBus.Error.AccessDenied"
    static let invalidArgsName = "org.freedesktop.DBus.Error.InvalidArgs"
    static let limitsExceededName = "org.freedesktop.DBus.Error.LimitsExceeded"
    static let failedName = "org.freedesktop.DBus.Error.Failed"
    static let notSupportedName = "org.freedesktop.DBus.Error.NotSupported"
    static let propertyReadOnlyName = "org.freedesktop.DBus.Error.PropertyReadOnly"
    static let unknownPropertyName = "org.freedesktop.DBus.Error.UnknownProperty"
    static let unknownInterfaceName = "org.freedesktop.DBus.Error.UnknownInterface"

    static func noSession(_ path: String) -> BusErrorReply {
        BusErrorReply(name: noSessionName, "there is no session \(path) of this connection")
    }
    static func noSuchObject(_ path: String) -> BusErrorReply {
        BusErrorReply(name: noSuchObjectName, "there is no object \(path)")
    }
    static func invalidArgs(_ message: String) -> BusErrorReply { BusErrorReply(name: invalidArgsName, message) }
    static func notSupported(_ message: String) -> BusErrorReply { BusErrorReply(name: notSupportedName, message) }
    static func limitsExceeded(_ message: String) -> BusErrorReply { BusErrorReply(name: limitsExceededName, message) }
    static func accessDenied(_ message: String) -> BusErrorReply { BusErrorReply(name: accessDeniedName, message) }
    static func propertyReadOnly(_ name: String) -> BusErrorReply {
        BusErrorReply(name: propertyReadOnlyName, "the property \(name) is read-only")
    }
    static func unknownProperty(_ interface: String, _ name: String) -> BusErrorReply {
        BusErrorReply(name: unknownPropertyName, "there is no property \(interface).\(name) here")
    }
}
