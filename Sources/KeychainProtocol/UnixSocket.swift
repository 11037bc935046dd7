#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import KeychainModel
import Synchronization

/// Why a socket operation stopped: kept apart from KeychainError so the daemon can log the
/// precise cause while telling the peer little.
public enum SocketFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// The peer closed the connection (EOF, or EPIPE/ECONNRESET).
    case closed
    /// Nothing (or not enough) arrived in time.
    case timedOut
    /// A frame header announced a length outside 1...limit.
    case badLength(UInt32)
    case system(String, Int32)
    /// This process closed the socket already: the call was refused rather than made on a
    /// number the kernel may have given to another open since.
    case closedHere

    public var description: String {
        switch self {
        case .closed: "connection closed by peer"
        case .timedOut: "timed out"
        case .badLength(let n): "frame length \(n) is 0 or over the limit"
        case .system(let call, let e): SystemCallError(call, errno: e).description
        case .closedHere: "the socket was already closed by this process"
        }
    }
}

/// A descriptor this value owns, closed exactly once: by `close()`, which consumes the owner so
/// that no second close can be written, or else when the owner goes away. Not copyable, since a
/// copy would be a second owner: in a multi-threaded daemon the kernel hands a closed number to
/// the next open at once, and a second close would close another thread's connection.
/// (swift-system's FileDescriptor is copyable, so it cannot say this.)
public struct OwnedDescriptor: ~Copyable, Sendable {
    public let rawValue: Int32

    /// Takes over `rawValue`, which no one else may close.
    public init(adopting rawValue: Int32) { self.rawValue = rawValue }

    public consuming func close() {
        let number = rawValue
        discard self
        _ = Glibc.close(number)
    }

    deinit { _ = Glibc.close(rawValue) }
}

/// A connected (or listening) AF_UNIX SOCK_STREAM socket. A reference, because a server hands
/// connections between threads and a call's socket is shut down by the thread that cancels
/// it; it owns one OwnedDescriptor, so however many threads hold it and call `close()`, the
/// descriptor is closed once: by the first `close()`, or when the last reference goes.
///
/// Every call on it goes through `withDescriptor`, which refuses once `close()` was called
/// (SocketFailure.closedHere): the number may belong to another open by then, another
/// connection's in this daemon. A call already under way when another thread closes keeps the
/// descriptor until it returns; the number goes back to the kernel after the last such call.
public final class UnixSocket: Sendable {
    /// The number the socket was opened with: what names it (in logs, as a key), valid for
    /// system calls only inside `withDescriptor`.
    public let fd: Int32
    private let state: Mutex<DescriptorUse>

    /// The descriptor, and the calls using it now.
    private struct DescriptorUse: ~Copyable {
        var owned: OwnedDescriptor?
        var callsUnderWay = 0
        var closing = false
    }

    /// Takes over `fd` (see OwnedDescriptor.init(adopting:)).
    public convenience init(fd: Int32) { self.init(OwnedDescriptor(adopting: fd)) }

    public init(_ descriptor: consuming OwnedDescriptor) {
        fd = descriptor.rawValue
        state = Mutex(DescriptorUse(owned: .some(descriptor)))
    }

    /// Runs `body` with the descriptor's number, which stays this socket's until `body`
    /// returns; SocketFailure.closedHere, without running it, once `close()` was called.
    public func withDescriptor<T>(_ body: (Int32) throws(SocketFailure) -> T) throws(SocketFailure) -> T {
        let open = state.withLock { use in
            guard !use.closing else { return false }
            use.callsUnderWay += 1
            return true
        }
        guard open else { throw .closedHere }
        defer { endCall() }
        return try body(fd)
    }

    private func endCall() {
        var last: OwnedDescriptor? = state.withLock { use in
            use.callsUnderWay -= 1
            return use.closing && use.callsUnderWay == 0 ? use.owned.take() : nil
        }
        if let descriptor = last.take() { descriptor.close() }
    }

    /// Builds a sockaddr_un for `path`, or nil when the path does not fit (108 bytes).
    static func address(_ path: String) -> (sockaddr_un, socklen_t)? {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard !bytes.isEmpty, bytes.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            buf.copyBytes(from: bytes)
            buf[bytes.count] = 0
        }
        return (addr, socklen_t(MemoryLayout<sockaddr_un>.size))
    }

    private static func newSocket() throws(SocketFailure) -> OwnedDescriptor {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system("socket", errno) }
        return OwnedDescriptor(adopting: fd)
    }

    /// Connects to the daemon at `path`.
    public static func connect(path: String) throws(SocketFailure) -> UnixSocket {
        guard var (addr, len) = address(path) else { throw .system("connect", ENAMETOOLONG) }
        let descriptor = try newSocket()
        let fd = descriptor.rawValue
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, len) }
        }
        // errno is read before the descriptor's deinit closes it on the way out.
        guard rc == 0 else { throw .system("connect", errno) }
        return UnixSocket(descriptor)
    }

    /// Binds and listens at `path` with `mode` (the caller has already removed a stale file).
    public static func listen(path: String, mode: mode_t, backlog: Int32 = 512) throws(SocketFailure) -> UnixSocket {
        guard var (addr, len) = address(path) else { throw .system("bind", ENAMETOOLONG) }
        let descriptor = try newSocket()
        let fd = descriptor.rawValue
        // Bind under a tight umask so the socket never exists with a looser mode, then chmod.
        let old = umask(0o177)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) }
        }
        let e = errno
        umask(old)
        guard rc == 0 else { throw .system("bind", e) }
        chmod(path, mode)
        guard Glibc.listen(fd, backlog) == 0 else { throw .system("listen", errno) }
        return UnixSocket(descriptor)
    }

    /// Waits for a connection; nil when the listening socket was shut down.
    public func accept() throws(SocketFailure) -> UnixSocket? {
        while true {
            switch try acceptOnce() {
            case .connection(let socket): return socket
            case .nothing: continue
            case .closed: return nil
            }
        }
    }

    private enum Accepted { case connection(UnixSocket), nothing, closed }

    /// One accept, on a blocking or non-blocking listener.
    private func acceptOnce() throws(SocketFailure) -> Accepted {
        do throws(SocketFailure) {
            return try withDescriptor { (fd) throws(SocketFailure) in
                do throws(SystemCallError) {
                    // Close-on-exec set by the same call (one fcntl fewer per connection).
                    let c = try SystemCall.retrying("accept4") { csystem_accept(fd) }
                    return .connection(UnixSocket(fd: c))
                } catch {
                    switch error.errno {
                    case EAGAIN, EWOULDBLOCK, ECONNABORTED: return .nothing  // another worker took it, or the client gave up
                    case EINVAL, EBADF: return .closed  // shut down
                    default: throw .system(error.call, error.errno)  // e.g. out of descriptors
                    }
                }
            }
        } catch .closedHere {
            return .closed
        }
    }

    /// Waits in `waiter` (made for this listening socket, which must be non-blocking) for a
    /// connection, until the waiter's wake descriptor becomes readable (then nil). Unlike
    /// shutting the listener down, this leaves the socket as it was: one handed over by a
    /// service manager must go on accepting for the daemon's next start.
    public func accept(waitingIn waiter: ConnectionWaiter) throws(SocketFailure) -> UnixSocket? {
        while true {
            let woken: Bool
            do throws(SocketFailure) {
                woken = try withDescriptor { (_) throws(SocketFailure) in
                    do throws(SystemCallError) {
                        return try SystemCall.retrying("epoll_wait") { csystem_wait_connection(waiter.epoll.rawValue) } == 0
                    } catch {
                        throw .system(error.call, error.errno)
                    }
                }
            } catch .closedHere {
                return nil
            }
            if woken { return nil }
            switch try acceptOnce() {
            case .connection(let socket): return socket
            case .nothing: continue
            case .closed: return nil
            }
        }
    }

    /// Makes calls on this socket return EAGAIN instead of blocking.
    public func setNonBlocking() throws(SocketFailure) {
        try withDescriptor { (fd) throws(SocketFailure) in
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else { throw .system("fcntl", errno) }
        }
    }

    /// Closes the descriptor if no one has yet (after the calls under way, if any); later
    /// calls on the socket are refused. Callers still close explicitly rather than wait for
    /// the last reference: a peer waits for the close.
    public func close() {
        var now: OwnedDescriptor? = state.withLock { use in
            use.closing = true
            return use.callsUnderWay == 0 ? use.owned.take() : nil
        }
        if let descriptor = now.take() { descriptor.close() }
    }

    /// Wakes any thread blocked on this socket (used at shutdown); nothing once closed.
    public func shutdownBoth() { _ = try? withDescriptor { fd in Glibc.shutdown(fd, Int32(SHUT_RDWR)) } }

    /// Ends what the peer may send (used at shutdown: requests under way still get answers).
    public func shutdownReading() { _ = try? withDescriptor { fd in Glibc.shutdown(fd, Int32(SHUT_RD)) } }

    // The failure is carried out of the untyped withUnsafeBytes in an Optional, not a Result:
    // Result<(), SocketFailure> is generic metadata that the runtime builds from its mangled
    // name, checking SocketFailure's conformance to Error by walking every conformance record
    // of the binary, on the first write of every process (9% of a `keychain get`'s
    // instructions, docs/performance.md).

    public func writeAll(_ bytes: [UInt8]) throws(SocketFailure) {
        var failure: SocketFailure?
        bytes.withUnsafeBytes { b in
            do throws(SocketFailure) { try writeAll(b) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    public func writeAll(_ bytes: SecretBytes) throws(SocketFailure) {
        var failure: SocketFailure?
        bytes.withUnsafeBytes { b in
            do throws(SocketFailure) { try writeAll(b) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    public func writeAll(_ bytes: UnsafeRawBufferPointer) throws(SocketFailure) {
        try withDescriptor { (fd) throws(SocketFailure) in
            do throws(SystemCallError) {
                try SystemCall.writeAll(bytes, call: "send") { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            } catch {
                if error.errno == EPIPE || error.errno == ECONNRESET { throw .closed }
                throw .system(error.call, error.errno)
            }
        }
    }

    /// Reads what has arrived (at least one byte, at most `buffer.count`), waiting until
    /// `deadline` (MonotonicClock nanoseconds) at the most.
    public func receive(into buffer: UnsafeMutableRawBufferPointer, deadline: UInt64) throws(SocketFailure) -> Int {
        try withDescriptor { (fd) throws(SocketFailure) in try receive(fd, into: buffer, deadline: deadline) }
    }

    private func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, deadline: UInt64) throws(SocketFailure) -> Int {
        while true {
            guard Self.milliseconds(until: deadline) > 0 else { throw .timedOut }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            // Each try waits only for what is left, so an interruption does not push the
            // deadline back.
            let p: Int32
            do {
                p = try SystemCall.retrying("poll") { poll(&pfd, 1, Self.milliseconds(until: deadline)) }
            } catch {
                throw .system(error.call, error.errno)
            }
            if p == 0 { throw .timedOut }
            let n: Int
            do {
                n = try SystemCall.retrying("recv") { recv(fd, buffer.baseAddress!, buffer.count, Int32(MSG_DONTWAIT)) }
            } catch {
                switch error.errno {
                case EAGAIN: continue  // woken with nothing to read after all
                case ECONNRESET: throw .closed
                default: throw .system(error.call, error.errno)
                }
            }
            if n == 0 { throw .closed }
            return n
        }
    }

    /// Whole milliseconds left until `deadline`, rounded up; 0 once it has passed.
    public static func milliseconds(until deadline: UInt64) -> Int32 {
        let now = MonotonicClock.nanoseconds()
        guard deadline > now else { return 0 }
        return Int32(clamping: (deadline - now + 999_999) / 1_000_000)
    }

}

/// One thread's wait for connections on a listening socket: an epoll instance holding the
/// listener (of the threads waiting on it, a connection wakes one) and a wake descriptor (which
/// wakes them all), kept for as long as the thread accepts. One instance per wait, as it was,
/// cost four system calls per connection: epoll_create1, two epoll_ctl and its close
/// (docs/performance.md, "keychaind's work per connection").
public final class ConnectionWaiter: Sendable {
    fileprivate let epoll: OwnedDescriptor

    public init(listener: UnixSocket, wake: Int32) throws(SocketFailure) {
        let fd = try listener.withDescriptor { (fd) throws(SocketFailure) in
            let waiter = csystem_connection_waiter(fd, wake)
            guard waiter >= 0 else { throw .system("epoll_ctl", errno) }
            return waiter
        }
        epoll = OwnedDescriptor(adopting: fd)
    }
}
