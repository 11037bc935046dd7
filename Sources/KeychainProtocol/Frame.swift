import KeychainModel

/// Length-prefixed frames: a u32 little-endian payload length, then the payload.
/// docs/protocol.md, section 2.
public enum Frame {
    /// Largest payload either side accepts: a 1 MiB secret plus generous room for attributes.
    public static let maxPayloadBytes = (1 << 20) + (256 << 10)

    public static func encode(_ payload: [UInt8]) -> [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(4 + payload.count)
        withUnsafeBytes(of: UInt32(payload.count).littleEndian) { out.append(contentsOf: $0) }
        out.append(contentsOf: payload)
        return out
    }

    /// Reads one frame's payload. Waits up to `idleTimeoutMs` for the first byte (a client may
    /// keep an idle connection), then at most `frameTimeoutMs` for each further wait, so a
    /// client that stops mid-frame is dropped. The length is checked before anything is
    /// allocated. Returns nil on a clean EOF between frames.
    public static func read(from socket: UnixSocket, idleTimeoutMs: Int32, frameTimeoutMs: Int32) throws(SocketFailure) -> [UInt8]? {
        var header = [UInt8](repeating: 0, count: 4)
        do {
            try socket.readExactly(into: &header, count: 1, timeoutMs: idleTimeoutMs)
        } catch .closed {
            return nil
        }
        try socket.readExactly(into: &header, from: 1, count: 3, timeoutMs: frameTimeoutMs)
        let length = UInt32(header[0]) | UInt32(header[1]) << 8 | UInt32(header[2]) << 16 | UInt32(header[3]) << 24
        guard length >= 1, length <= UInt32(maxPayloadBytes) else { throw .badLength(length) }
        var payload = [UInt8](repeating: 0, count: Int(length))
        try socket.readExactly(into: &payload, count: Int(length), timeoutMs: frameTimeoutMs)
        return payload
    }
}
