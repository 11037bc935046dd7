import KeychainModel
import KeychainProtocol

/// Backup files crossing the socket in pieces (frames are at most ~1.3 MiB), held between the
/// calls that move them. Owned by the RequestHandler, so used under the store's lock only.
struct BackupTransfers {
    private struct Transfer {
        var bytes: [UInt8]
        var filled: Int
        let started: Double
    }

    private var outgoing: [UInt64: Transfer] = [:]
    private var incoming: [UInt64: Transfer] = [:]
    private var nextSession: UInt64 = 1

    /// A file larger than this is refused: 1 GiB holds millions of items.
    static let maxBytes = 1 << 30
    static let maxTransfers = 4
    /// A transfer left unfinished this long (seconds) is dropped.
    static let lifetime = 600.0

    private mutating func expire(at now: Double) {
        outgoing = outgoing.filter { now - $0.value.started < Self.lifetime }
        incoming = incoming.filter { now - $0.value.started < Self.lifetime }
    }

    private mutating func newSession(at now: Double) throws(KeychainError) -> UInt64 {
        expire(at: now)
        guard outgoing.count + incoming.count < Self.maxTransfers else {
            throw KeychainError(.allocate, "too many backups or restores in progress; finish one first or wait \(Int(Self.lifetime)) s")
        }
        defer { nextSession += 1 }
        return nextSession
    }

    /// Holds a sealed backup file for the client to read.
    mutating func offer(_ file: [UInt8], at now: Double) throws(KeychainError) -> UInt64 {
        let session = try newSession(at: now)
        outgoing[session] = Transfer(bytes: file, filled: file.count, started: now)
        return session
    }

    /// The piece of an offered file at `offset`; the transfer ends with its last piece.
    mutating func read(_ session: UInt64, offset: UInt64) throws(KeychainError) -> [UInt8] {
        guard let t = outgoing[session] else { throw KeychainError(.param, "no backup in progress with session \(session)") }
        guard offset <= UInt64(t.bytes.count) else { throw KeychainError(.param, "offset \(offset) is past the end of the backup") }
        let start = Int(offset)
        let end = min(t.bytes.count, start + Request.chunkBytes)
        if end == t.bytes.count { outgoing[session] = nil }
        return Array(t.bytes[start..<end])
    }

    /// Starts receiving a file of `size` bytes.
    mutating func expect(size: UInt64, at now: Double) throws(KeychainError) -> UInt64 {
        guard size > 0, size <= UInt64(Self.maxBytes) else {
            throw KeychainError(.param, "a backup file of \(size) bytes is out of range (1 byte to \(Self.maxBytes >> 20) MiB)")
        }
        let session = try newSession(at: now)
        incoming[session] = Transfer(bytes: [UInt8](repeating: 0, count: Int(size)), filled: 0, started: now)
        return session
    }

    /// Pieces arrive in order.
    mutating func write(_ session: UInt64, offset: UInt64, bytes: [UInt8]) throws(KeychainError) {
        guard var t = incoming[session] else { throw KeychainError(.param, "no restore in progress with session \(session)") }
        guard offset == UInt64(t.filled), t.filled + bytes.count <= t.bytes.count else {
            throw KeychainError(.param, "restore piece at \(offset) of \(bytes.count) bytes does not follow the \(t.filled) received of \(t.bytes.count)")
        }
        incoming[session] = nil  // avoid a copy while changing it
        t.bytes.replaceSubrange(t.filled..<(t.filled + bytes.count), with: bytes)
        t.filled += bytes.count
        incoming[session] = t
    }

    /// The whole received file; the transfer ends.
    mutating func take(_ session: UInt64) throws(KeychainError) -> [UInt8] {
        guard let t = incoming.removeValue(forKey: session) else {
            throw KeychainError(.param, "no restore in progress with session \(session)")
        }
        guard t.filled == t.bytes.count else {
            throw KeychainError(.decode, "the backup file arrived truncated: \(t.filled) of \(t.bytes.count) bytes")
        }
        return t.bytes
    }
}
