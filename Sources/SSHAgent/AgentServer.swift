#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
import Synchronization

/// Serves a KeyAgent on a listening socket: a thread per connection (agent clients are few
/// and short-lived), the peer's uid checked before a byte is read, frames capped before
/// anything is allocated for them.
public final class AgentServer: Sendable {
    private let agent: KeyAgent
    private let listener: UnixSocket
    private let log: @Sendable (String) -> Void
    private let open = Atomic<Int>(0)

    /// Connections beyond this are closed at once: a runaway client cannot pin threads.
    public static let maximumConnections = 64
    public init(agent: KeyAgent, listener: UnixSocket, log: @escaping @Sendable (String) -> Void) {
        self.agent = agent
        self.listener = listener
        self.log = log
    }

    /// Accepts connections until the listener is shut down.
    public func run() {
        while true {
            let connection: UnixSocket?
            do {
                connection = try listener.accept()
            } catch {
                log("accept failed: \(error)")
                usleep(100_000)  // e.g. out of descriptors: do not spin
                continue
            }
            guard let connection else { return }
            guard open.add(1, ordering: .relaxed).newValue <= Self.maximumConnections else {
                open.subtract(1, ordering: .relaxed)
                connection.close()
                continue
            }
            let started = DetachedThread.start { [self] in
                serve(connection)
                connection.close()
                open.subtract(1, ordering: .relaxed)
            }
            if !started {
                connection.close()
                open.subtract(1, ordering: .relaxed)
            }
        }
    }

    /// Whether the kernel says `peer` may use this agent: the agent's own uid, or root (who
    /// could read the keys' caller's files anyway), as OpenSSH's agent decides.
    static func admits(_ peer: PeerCredentials?) -> Bool {
        guard let peer else { return false }
        return peer.uid == getuid() || peer.uid == 0
    }

    /// The executable /proc/PID/exe names, or nil when it cannot be read (the process is gone,
    /// or is not dumpable). Only shown to the person: the pid may be reused by then.
    static func executable(of pid: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/\(pid)/exe", &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    func serve(_ connection: UnixSocket) {
        let peer = PeerCredentials.of(connection)
        guard Self.admits(peer) else {
            log("refused a connection from uid \(peer.map { String($0.uid) } ?? "unknown") (pid \(peer.map { String($0.pid) } ?? "unknown")): only uid \(getuid()) may use this agent")
            return
        }
        while true {
            let message: SecretBytes
            do {
                guard let next = try AgentFrame.read(from: connection) else { return }
                message = next
            } catch {
                if error != .closed { log("dropped a connection: \(error)") }
                return
            }
            do {
                try connection.writeAll(AgentFrame.frame(agent.answer(message, from: peer).message))
            } catch {
                return
            }
        }
    }
}

/// The agent protocol's framing: a big-endian uint32 length, then the message (RFC 9987 §3).
public enum AgentFrame {
    /// The limit on a message in either direction, as OpenSSH's agent and client apply it.
    public static let maximumLength = 256 * 1024
    /// How long the rest of a frame may take once its first byte came; the wait for a new
    /// request has no limit (ssh keeps a forwarded agent's connection open for the session).
    static let timeoutMs: UInt64 = 10_000

    public static func frame(_ message: [UInt8]) -> [UInt8] {
        var w = SSHWriter()
        w.string(message)
        return w.bytes
    }

    /// The next message (type and body), or nil at a clean end between messages. A length
    /// of 0 or over 256 KiB is .badLength: the connection is dropped, as OpenSSH does.
    public static func read(from connection: UnixSocket) throws(SocketFailure) -> SecretBytes? {
        let header = UnsafeMutableRawBufferPointer.allocate(byteCount: 4, alignment: 4)
        defer { header.deallocate() }
        let first: Int
        do {
            first = try connection.receive(into: header, deadline: .max)
        } catch .closed {
            return nil
        }
        let deadline = MonotonicClock.nanoseconds() + timeoutMs * 1_000_000
        try fill(UnsafeMutableRawBufferPointer(rebasing: header[first...]), from: connection, deadline: deadline)
        let length = header.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard length >= 1, length <= UInt32(maximumLength) else { throw .badLength(length) }
        return try SecretBytes(count: Int(length)) { (b) throws(SocketFailure) in
            try fill(b, from: connection, deadline: deadline)
        }
    }

    private static func fill(_ buffer: UnsafeMutableRawBufferPointer, from connection: UnixSocket, deadline: UInt64) throws(SocketFailure) {
        var done = 0
        while done < buffer.count {
            done += try connection.receive(into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]), deadline: deadline)
        }
    }
}
