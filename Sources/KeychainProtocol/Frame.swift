#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// Length-prefixed frames: a u32 little-endian payload length, then the payload.
/// docs/protocol.md, section 2.
public enum Frame {
    /// Largest request payload: a 1 MiB secret plus generous room for attributes.
    public static let maxPayloadBytes = (1 << 20) + (256 << 10)
    /// Largest response payload: room for the largest item a request can store plus what the
    /// daemon adds to it (group, protection class, dates, persistent reference), so that every
    /// item that can be stored can be read back. Longer answers come in several frames.
    public static let maxResponsePayloadBytes = maxPayloadBytes + (64 << 10)

    /// Reads one frame without buffering (never reads past it): for one-shot callers and tests.
    /// Connections that exchange many frames use FrameReader, which needs fewer system calls.
    /// Returns nil on a clean EOF before the frame. The frame must arrive in full within
    /// `frameTimeoutMs` of its first byte.
    public static func read(from socket: UnixSocket, idleTimeoutMs: Int32, frameTimeoutMs: Int32,
                            maxPayload: Int = maxResponsePayloadBytes) throws(SocketFailure) -> SecretBytes? {
        var header = [UInt8](repeating: 0, count: 4)
        let idle = Frame.deadline(afterMs: idleTimeoutMs)
        // Failures leave the untyped withUnsafeMutableBytes in an Optional (no Result: see
        // UnixSocket.writeAll).
        var failure: SocketFailure?
        header.withUnsafeMutableBytes { h in
            do throws(SocketFailure) { _ = try socket.receive(into: UnsafeMutableRawBufferPointer(rebasing: h[0..<1]), deadline: idle) } catch { failure = error }
        }
        if let failure {
            if failure == .closed { return nil }
            throw failure
        }
        let deadline = Frame.deadline(afterMs: frameTimeoutMs)
        var got = 1
        header.withUnsafeMutableBytes { h in
            do throws(SocketFailure) {
                while got < 4 { got += try socket.receive(into: UnsafeMutableRawBufferPointer(rebasing: h[got...]), deadline: deadline) }
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
        let length = UInt32(header[0]) | UInt32(header[1]) << 8 | UInt32(header[2]) << 16 | UInt32(header[3]) << 24
        guard length >= 1, length <= UInt32(maxPayload) else { throw .badLength(length) }
        var payload = ByteWriter(capacity: min(Int(length), growthStep))
        try readRest(of: Int(length), into: &payload, from: socket, deadline: deadline)
        return payload.finish()
    }

    /// A frame's deadline: `ms` from now (its first byte has just arrived).
    static func deadline(afterMs ms: Int32) -> UInt64 {
        MonotonicClock.nanoseconds() &+ UInt64(max(ms, 0)) &* 1_000_000
    }

    /// How much a payload buffer grows by at least: it grows with what arrives, so a header
    /// announcing a megabyte costs nothing until the megabyte comes.
    static let growthStep = 64 << 10

    /// Reads until `payload` holds `length` bytes, growing it (at most doubling) as they come.
    static func readRest(of length: Int, into payload: inout ByteWriter, from socket: UnixSocket, deadline: UInt64) throws(SocketFailure) {
        while payload.count < length {
            let chunk = min(length - payload.count, max(growthStep, payload.count))
            try payload.append(upTo: chunk) { (dst) throws(SocketFailure) in try socket.receive(into: dst, deadline: deadline) }
        }
    }

    /// A frame around `payload`, in wiped memory (for tests and tools; clients and the daemon
    /// build their frames in one piece with WireCodec.frame).
    public static func encode<C: Collection>(_ payload: C) -> SecretBytes where C.Element == UInt8 {
        var w = ByteWriter(capacity: 4 + payload.count)
        w.lengthPrefixed(payload)
        return w.finish()
    }
}

/// Reads frames from one connection through a buffer, so that a small request or response
/// usually costs one recv. The owner must not read the socket by other means (the reader sets
/// its receive time-out).
public final class FrameReader {
    private let socket: UnixSocket
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0

    /// The longest payload this reader accepts: requests on the daemon's side, responses on
    /// the client's.
    private let maxPayload: Int

    public init(_ socket: UnixSocket, capacity: Int = 64 << 10, maxPayload: Int = Frame.maxPayloadBytes) {
        self.socket = socket
        self.maxPayload = maxPayload
        // Not zeroed: only what recv wrote is ever read, and zeroing 16 KiB per connection
        // showed in keychaind's profile (and touched four fresh pages in a one-call client).
        buffer = [UInt8](unsafeUninitializedCapacity: capacity) { _, initialized in initialized = capacity }
    }

    /// How far into the buffer anything was ever received: what deinit must wipe. Wiping the
    /// whole 16 KiB of a one-call client's buffer was 2% of a `keychain get`'s instructions.
    private var touched = 0

    deinit { wipe(0, touched) }

    private var buffered: Int { end - start }
    /// Whether bytes of a next frame are already read from the socket (a poll would not show them).
    public var hasBuffered: Bool { buffered > 0 }

    /// The next frame's payload, or nil on a clean EOF between frames. Waits up to
    /// `idleTimeoutMs` for a frame to begin (a client may keep an idle connection), then at
    /// most `frameTimeoutMs` per wait for the rest, so a peer that stops mid-frame is dropped.
    /// The length is checked before anything is allocated.
    public func next(idleTimeoutMs: Int32, frameTimeoutMs: Int32) throws(SocketFailure) -> SecretBytes? {
        if buffered == 0 {
            do {
                try fill(atLeast: 1, timeoutMs: idleTimeoutMs)
            } catch .closed {
                return nil
            }
        }
        // The whole frame must arrive within frameTimeoutMs of its first byte, however the
        // bytes trickle in: a time-out per read would let one byte every few seconds hold the
        // connection, and its buffer, forever.
        let deadline = Frame.deadline(afterMs: frameTimeoutMs)
        try fill(atLeast: 4, deadline: deadline)
        let length = UInt32(buffer[start]) | UInt32(buffer[start + 1]) << 8
            | UInt32(buffer[start + 2]) << 16 | UInt32(buffer[start + 3]) << 24
        guard length >= 1, length <= UInt32(maxPayload) else { throw .badLength(length) }
        let total = 4 + Int(length)
        if total <= buffer.count {
            try fill(atLeast: total, deadline: deadline)
            let payload = buffer.withUnsafeBytes { SecretBytes(UnsafeRawBufferPointer(rebasing: $0[(start + 4)..<(start + total)])) }
            consume(total)
            return payload
        }
        // Larger than the buffer (a big secret): take what is buffered, then read the rest into
        // a buffer that grows with what arrives.
        var payload = ByteWriter(capacity: min(Int(length), max(Frame.growthStep, buffered)))
        buffer.withUnsafeBytes { payload.raw(UnsafeRawBufferPointer(rebasing: $0[(start + 4)..<end])) }
        consume(buffered)
        try Frame.readRest(of: Int(length), into: &payload, from: socket, deadline: deadline)
        return payload.finish()
    }

    /// Reads until `count` bytes are buffered, waiting up to `timeoutMs` for each read, or
    /// until `deadline` for all of them. Blocking reads with SO_RCVTIMEO: one recv per frame in
    /// the common case (a poll before each read would double the system calls).
    private func fill(atLeast count: Int, timeoutMs: Int32 = -1, deadline: UInt64? = nil) throws(SocketFailure) {
        if buffered >= count { return }
        if buffer.count - start < count {  // compact: move the partial frame to the front
            let n = buffered
            buffer.withUnsafeMutableBytes { b in
                b.baseAddress!.copyMemory(from: b.baseAddress! + start, byteCount: n)
            }
            wipe(n, start + n)
            start = 0
            end = n
        }
        while buffered < count {
            if let deadline {
                let left = UnixSocket.milliseconds(until: deadline)
                guard left > 0 else { throw .timedOut }
                try setReceiveTimeout(left)
            } else {
                try setReceiveTimeout(timeoutMs)
            }
            let (n, e) = try socket.withDescriptor { (fd) throws(SocketFailure) in
                buffer.withUnsafeMutableBytes { b in (recv(fd, b.baseAddress! + end, b.count - end, 0), errno) }
            }
            if n > 0 {
                end += n
                touched = max(touched, end)
                continue
            }
            if n == 0 { throw .closed }
            switch e {
            case EINTR: continue
            case EAGAIN: throw .timedOut
            case ECONNRESET: throw .closed
            default: throw .system("recv", errno)
            }
        }
    }

    /// Watches the socket without sleeping, for up to `windowNs` nanoseconds or until
    /// `keepWatching` says stop; true when data, the peer's close or an error has arrived
    /// (then `next` will not sleep, and reports a close or an error as usual).
    /// A sleeping reader pays for the kernel to wake its CPU when the data comes; a watching
    /// one does not, at the price of the CPU time it watches for.
    public func watch(forNs windowNs: UInt64, while keepWatching: () -> Bool) -> Bool {
        if buffered > 0 { return true }
        start = 0
        end = 0
        let deadline = MonotonicClock.nanoseconds() &+ windowNs
        repeat {
            // Closed here: next() reports it.
            guard let (n, e) = try? socket.withDescriptor({ (fd) throws(SocketFailure) in
                buffer.withUnsafeMutableBytes { b in (recv(fd, b.baseAddress!, b.count, Int32(MSG_DONTWAIT)), errno) }
            }) else { return true }
            if n > 0 {
                end = n
                touched = max(touched, end)
                return true
            }
            // The peer closed, or an error: stop watching and let next() read it and report
            // it as it would have (a close between frames is a clean end, not a failure).
            if n == 0 || (e != EAGAIN && e != EINTR) { return true }
        } while keepWatching() && MonotonicClock.nanoseconds() < deadline
        return false
    }

    /// The receive time-out now set on the socket (-2: not yet set).
    private var currentTimeoutMs: Int32 = -2

    private func setReceiveTimeout(_ ms: Int32) throws(SocketFailure) {
        guard ms != currentTimeoutMs else { return }
        var tv = timeval(tv_sec: ms < 0 ? 0 : Int(ms / 1000), tv_usec: ms < 0 ? 0 : Int(ms % 1000) * 1000)
        try socket.withDescriptor { (fd) throws(SocketFailure) in
            guard setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
                throw .system("setsockopt", errno)
            }
        }
        currentTimeoutMs = ms
    }

    /// Drops `count` bytes from the front, zeroing them: they may have held a secret.
    private func consume(_ count: Int) {
        wipe(start, start + count)
        start += count
        if start == end {
            start = 0
            end = 0
        }
    }

    private func wipe(_ from: Int, _ to: Int) {
        guard to > from else { return }
        buffer.withUnsafeMutableBytes { b in explicit_bzero(b.baseAddress! + from, to - from) }
    }
}

/// CLOCK_MONOTONIC in nanoseconds (a vDSO call, no system call).
public enum MonotonicClock {
    public static func nanoseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}
