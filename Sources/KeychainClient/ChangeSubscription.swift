#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol

/// keychaind's change notices (op 47) on a connection that carries nothing else: the Secret
/// Service items the caller may know of that were created, changed or deleted, and the lock
/// state, as they are committed. Poll `fileDescriptor` for input, then `read()`.
public final class ChangeSubscription {
    public struct Notice: Sendable, Equatable {
        public enum Kind: String, Sendable {
            case created, changed, deleted
            /// Something changed that keychaind does not name (a restore, a sync pull, a
            /// delete of a locked item, a subscriber that fell behind): read again.
            case unknown
            /// The lock state moved: `locked` says to what.
            case lock
        }

        public let kind: Kind
        /// The item's persistent reference (20 bytes), empty for unknown and lock.
        public let persistentRef: [UInt8]
        /// The item's svce ("secret-service:" and its collection), empty for unknown and lock.
        public let service: String
        /// Made through a connection of this same process (the bridge's own calls).
        public let own: Bool
        public let locked: Bool
    }

    private let socket: UnixSocket
    private let reader: FrameReader

    public var fileDescriptor: Int32 { socket.fd }

    init(_ socket: UnixSocket, timeoutMs: Int32) throws(KeychainError) {
        self.socket = socket
        reader = FrameReader(socket, capacity: 16 << 10, maxPayload: Frame.maxResponsePayloadBytes)
        let answer: SecretBytes?
        do {
            try socket.writeAll(WireCodec.frame(.changeSubscribe))
            answer = try reader.next(idleTimeoutMs: timeoutMs, frameTimeoutMs: timeoutMs)
        } catch {
            throw KeychainError(.serviceNotAvailable, "cannot subscribe to keychaind's change notices: \(error)")
        }
        guard let answer else {
            throw KeychainError(.serviceNotAvailable, "keychaind closed the connection instead of answering changeSubscribe")
        }
        // The socket closes with this object, whether or not the subscription was taken.
        if let error = try WireCodec.decodeResponse(answer).error { throw error }
    }

    deinit {
        socket.close()
    }

    /// The notices of one frame; waits for one when none is buffered. Throws
    /// errSecServiceNotAvailable when keychaind closed the subscription (it stopped).
    public func read() throws(KeychainError) -> [Notice] {
        let frame: SecretBytes?
        do {
            frame = try reader.next(idleTimeoutMs: -1, frameTimeoutMs: 10_000)
        } catch {
            throw KeychainError(.serviceNotAvailable, "keychaind's change notices broke off: \(error)")
        }
        guard let payload = frame else { throw KeychainError(.serviceNotAvailable, "keychaind closed the change notices") }
        let response = try WireCodec.decodeResponse(payload)
        if let error = response.error { throw error }
        guard case .list(let items) = response.result else { throw KeychainError(.decode, "a change notice is not a list") }
        return items.compactMap { item in
            guard case .attributes(let d) = item, let kind = d["kind"]?.stringValue.flatMap(Notice.Kind.init(rawValue:)) else { return nil }
            var ref: [UInt8] = []
            if case .data(let bytes)? = d["v_PersistentRef"] { ref = Array(bytes) }
            var own = false, locked = false
            if case .bool(let b)? = d["own"] { own = b }
            if case .bool(let b)? = d["locked"] { locked = b }
            return Notice(kind: kind, persistentRef: ref, service: d["svce"]?.stringValue ?? "", own: own, locked: locked)
        }
    }

    /// Whether a frame is already buffered (read() would not wait).
    public var hasBuffered: Bool { reader.hasBuffered }
}
