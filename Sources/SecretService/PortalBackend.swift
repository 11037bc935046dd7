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
    static let portalRequestInterface = "org.freedesktop.impl.portal.Request"

    /// Serves the backend's object. Call before owning `portalBusName`.
    public func servePortal() throws(KeychainError) {
        try bus.addFallback(Self.portalPath) { [unowned self] in handlePortal($0) }
    }

    func handlePortal(_ call: BusMessage) -> Bool {
        guard call.isMethodCall, let path = call.path, let sender = call.sender,
              let interface = call.interface, let member = call.member else { return false }
        do {
            let values: [BusValue]
            switch (interface, member) {
            case (Self.portalRequestInterface, "Close") where path != Self.portalPath:
                // Nothing is left to stop (no dialog; the secret is written before the
                // reply): the object goes, so that the portal drops its request quietly.
                try requirePortalFrontEnd(sender)
                guard portalRequests.close(path) else { return false }
                values = []
            case _ where path != Self.portalPath:
                return false
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
        let handle = try call.readObjectPath()
        let appID = try call.readString()
        guard case .fileDescriptor(let fd) = try call.readValue() else {
            throw BusErrorReply.invalidArgs("RetrieveSecret takes a file descriptor")
        }
        defer { close(fd) }
        try requirePortalFrontEnd(sender)
        portalRequests.opened(handle)
        // Unsandboxed apps come with "": they use the Secret Service itself.
        guard SecretServiceNames.isValidAppID(appID) else { return [.uint32(2), .variantDictionary([:])] }
        // The descriptor is the sandboxed app's choice, passed on by the portal: only a pipe or
        // a socket (what libsecret sends), so that the secret lands in no file.
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFIFO || (info.st_mode & S_IFMT) == S_IFSOCK else {
            BridgeLog.error("the portal's descriptor for \(appID) is not a pipe or a socket")
            return [.uint32(2), .variantDictionary([:])]
        }
        let secret = try delegated(sender).portalSecret(appID: appID)
        if let failure = secret.withUnsafeBytes({ Self.writeWithin(Self.portalWriteMilliseconds, fd, $0) }) {
            BridgeLog.error("cannot write the portal secret for \(appID): \(failure)")
            return [.uint32(2), .variantDictionary([:])]
        }
        return [.uint32(0), .variantDictionary([:])]
    }

    /// AccessDenied unless `sender` owns org.freedesktop.portal.Desktop.
    func requirePortalFrontEnd(_ sender: String) throws(BusErrorReply) {
        let owner = try? bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                                  member: "GetNameOwner", arguments: [.string(Self.portalFrontEnd)]).readString()
        guard owner == sender else {
            throw .accessDenied("the portal backend answers only the owner of \(Self.portalFrontEnd)")
        }
    }

    /// How long RetrieveSecret may wait for the app's descriptor to take the secret: a fresh
    /// pipe takes 64 bytes at once, and the bus waits meanwhile.
    static let portalWriteMilliseconds: Int32 = 250

    /// Writes all of `bytes` without blocking for more than `milliseconds` in all: an app that
    /// passes a full pipe and keeps its reader must not stop the bridge. The descriptor is made
    /// non-blocking (its file description is shared with the app, which only reads the other
    /// end). Nil on success, else why not.
    static func writeWithin(_ milliseconds: Int32, _ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> String? {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { return "cannot make it non-blocking" }
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let end = Int64(deadline.tv_sec) * 1000 + Int64(deadline.tv_nsec) / 1_000_000 + Int64(milliseconds)
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n > 0 {
                offset += n
                continue
            }
            guard n < 0, errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR else {
                return n == 0 ? "nothing written" : String(cString: strerror(errno))
            }
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let left = end - (Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000)
            guard left > 0 else { return "the descriptor took no more within \(milliseconds) ms" }
            var watch = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&watch, 1, Int32(left))
        }
        return nil
    }
}

/// The `org.freedesktop.impl.portal.Request` objects of the portal backend: one at the handle
/// of each RetrieveSecret call, as the portal specification asks of a backend. xdg-desktop-portal
/// forwards an app's Request.Close to it, and fails the app's Close when no object is there.
/// The bridge answers RetrieveSecret before it reads another message, so a Close always
/// comes after the reply: the object outlives the call, and the latest ones are kept.
struct PortalRequests {
    static let kept = 16
    private var handles: [String] = []

    /// A call came with `handle` (a path under the portal's request prefix).
    mutating func opened(_ handle: String) {
        guard handle.hasPrefix(SecretServiceBridge.portalPath + "/request/") else { return }
        handles.removeAll { $0 == handle }
        handles.append(handle)
        if handles.count > Self.kept { handles.removeFirst(handles.count - Self.kept) }
    }

    /// Close: false when there is no object at `handle` (never made, closed, or long gone).
    mutating func close(_ handle: String) -> Bool {
        guard let index = handles.firstIndex(of: handle) else { return false }
        handles.remove(at: index)
        return true
    }
}
