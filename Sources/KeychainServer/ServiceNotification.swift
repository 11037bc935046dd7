#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol

/// systemd's service notification (sd_notify, for `Type=notify` units): each phase is one
/// datagram to the socket named by $NOTIFY_SOCKET. Written here rather than linking
/// libsystemd: it is a few lines, and the daemon then needs no library the host may lack.
public struct ServiceNotification: ReadinessObserver {
    /// The socket's address as the variable gives it: a path, or '@' then an abstract name.
    public let socketAddress: String

    /// Nil when the daemon was not started by a service manager that listens.
    public init?(environment: [String: String]) {
        guard let address = environment["NOTIFY_SOCKET"] else { return nil }
        self.init(socketAddress: address)
    }

    public init?(socketAddress: String) {
        guard socketAddress.hasPrefix("/") || socketAddress.hasPrefix("@"), socketAddress.utf8.count > 1 else { return nil }
        self.socketAddress = socketAddress
    }

    /// What the service manager is told for `phase`.
    public static func message(for phase: ServicePhase, monotonicMicroseconds: UInt64) -> String {
        switch phase {
        case .ready: "READY=1\nSTATUS=serving"
        // systemd wants the time the reload began, to tell this one's READY=1 from an older one.
        case .reloading: "RELOADING=1\nMONOTONIC_USEC=\(monotonicMicroseconds)\nSTATUS=reloading the config"
        case .stopping: "STOPPING=1\nSTATUS=stopping"
        }
    }

    /// Best effort: a manager that has gone away must not stop the daemon serving.
    public func announce(_ phase: ServicePhase) {
        _ = try? send(Self.message(for: phase, monotonicMicroseconds: MonotonicClock.nanoseconds() / 1000))
    }

    public func send(_ message: String) throws(SystemCallError) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var name = Array(socketAddress.utf8)
        let abstract = name.first == UInt8(ascii: "@")
        if abstract { name[0] = 0 }  // an abstract name starts with a NUL byte
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard name.count < capacity else { throw SystemCallError("sendto", errno: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        // A path's length counts its terminating NUL (sun_path was zeroed); an abstract
        // name's is exactly its bytes, since every byte of it is part of the name.
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + name.count + (abstract ? 0 : 1))
        let fd = try SystemCall.retrying("socket") { socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        defer { close(fd) }
        let bytes = Array(message.utf8)
        try SystemCall.retrying("sendto") {
            bytes.withUnsafeBytes { b in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, b.baseAddress, b.count, Int32(MSG_NOSIGNAL), $0, length)
                    }
                }
            }
        }
    }
}
