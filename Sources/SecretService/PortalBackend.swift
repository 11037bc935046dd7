#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainClient

/// The desktop portal's Secret backend (design §4): `org.freedesktop.impl.portal.Secret` at
/// /org/freedesktop/portal/desktop on its own bus name. xdg-desktop-portal calls
/// RetrieveSecret for a sandboxed app; the bridge answers only the connection that owns
/// org.freedesktop.portal.Desktop, and keychaind checks again that this caller is a configured
/// portal executable before it hands out the app's secret (group `portal.<app id>`).
extension SecretServiceBridge {
    public static let portalBusName = "org.freedesktop.impl.portal.desktop.keychain"
    static let portalPath = "/org/freedesktop/portal/desktop"
    static let portalInterface = "org.freedesktop.impl.portal.Secret"
    static let portalFrontEnd = "org.freedesktop.portal.Desktop"

    /// Serves the backend's object. Call before owning `portalBusName`.
    public func servePortal() throws(KeychainError) {
        try bus.addFallback(Self.portalPath) { [unowned self] in handlePortal($0) }
    }

    func handlePortal(_ call: BusMessage) -> Bool {
        guard call.isMethodCall, call.path == Self.portalPath, let sender = call.sender,
              let interface = call.interface, let member = call.member else { return false }
        do {
            let values: [BusValue]
            switch (interface, member) {
            case (Self.portalInterface, "RetrieveSecret"):
                values = try retrieveSecret(call, sender: sender)
            case (Self.propertiesInterface, "Get"):
                guard try call.readString() == Self.portalInterface, try call.readString() == "version" else {
                    throw BusErrorReply(name: BusErrorReply.unknownPropertyName, "the portal backend has one property, version")
                }
                values = [.variant(.uint32(1))]
            case (Self.propertiesInterface, "GetAll"):
                guard try call.readString() == Self.portalInterface else {
                    throw BusErrorReply(name: BusErrorReply.unknownInterfaceName, "the portal backend serves \(Self.portalInterface)")
                }
                values = [.variantDictionary(["version": .uint32(1)])]
            default:
                return false
            }
            try bus.reply(to: call, values)
        } catch let error as BusErrorReply {
            try? bus.replyError(to: call, name: error.name, message: error.message)
        } catch let error as KeychainError {
            let reply = BusErrorReply(error)
            try? bus.replyError(to: call, name: reply.name, message: reply.message)
        } catch {
            try? bus.replyError(to: call, name: BusErrorReply.failedName, message: "\(error)")
        }
        return true
    }

    /// RetrieveSecret(o handle, s app_id, h fd, a{sv} options) → (u response, a{sv} results):
    /// the app's secret written to `fd`, response 0; 2 for a bad app id or a failed write.
    func retrieveSecret(_ call: BusMessage, sender: String) throws -> [BusValue] {
        _ = try call.readObjectPath()
        let appID = try call.readString()
        guard case .fileDescriptor(let fd) = try call.readValue() else {
            throw BusErrorReply.invalidArgs("RetrieveSecret takes a file descriptor")
        }
        defer { close(fd) }
        let owner = try? bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                                  member: "GetNameOwner", arguments: [.string(Self.portalFrontEnd)]).readString()
        guard owner == sender else {
            throw BusErrorReply.accessDenied("the portal backend answers only the owner of \(Self.portalFrontEnd)")
        }
        // Unsandboxed apps come with "": they use the Secret Service itself.
        guard SecretServiceNames.isValidAppID(appID) else { return [.uint32(2), .variantDictionary([:])] }
        let secret = try delegated(sender).portalSecret(appID: appID)
        let written = secret.withUnsafeBytes { buffer in
            Result { () throws(SystemCallError) in try SystemCall.writeAll(fd, buffer) }
        }
        if case .failure(let error) = written {
            BridgeLog.error("cannot write the portal secret for \(appID): \(error.reason)")
            return [.uint32(2), .variantDictionary([:])]
        }
        return [.uint32(0), .variantDictionary([:])]
    }
}
