import KeychainModel

/// Reads the SSH wire encoding (RFC 4251 §5: uint32, byte, string, mpint) out of one agent
/// message body. The body is held as SecretBytes because an ADD_IDENTITY body carries a
/// private key; every read checks the length it is told against what is left, so a malformed
/// body ends in errSecDecode, never in a trap or an allocation the sender chose.
struct SSHReader {
    private let body: SecretBytes
    private var position: Int

    init(_ body: SecretBytes, from position: Int = 0) {
        self.body = body
        self.position = position
    }

    var isAtEnd: Bool { position == body.count }
    private var remaining: Int { body.count - position }

    mutating func byte() throws(KeychainError) -> UInt8 {
        guard remaining >= 1 else { throw Self.truncated("a byte") }
        defer { position += 1 }
        return body[position]
    }

    mutating func uint32() throws(KeychainError) -> UInt32 {
        guard remaining >= 4 else { throw Self.truncated("a uint32") }
        var value: UInt32 = 0
        for i in 0..<4 { value = value << 8 | UInt32(body[position + i]) }
        position += 4
        return value
    }

    /// A length-prefixed string's bytes, still inside the wiped body.
    mutating func string(_ what: String) throws(KeychainError) -> Slice<SecretBytes> {
        let length = try uint32()
        guard UInt64(length) <= UInt64(remaining) else {
            throw KeychainError(.decode, "agent message: \(what) claims \(length) bytes, \(remaining) remain")
        }
        defer { position += Int(length) }
        return body[position..<(position + Int(length))]
    }

    /// A string that is not secret (key blobs, data to sign, names), as an ordinary array.
    mutating func publicString(_ what: String) throws(KeychainError) -> [UInt8] {
        Array(try string(what))
    }

    /// A string that must be UTF-8 text (key type names, comments, extension names).
    mutating func text(_ what: String) throws(KeychainError) -> String {
        let bytes = try publicString(what)
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw KeychainError(.decode, "agent message: \(what) is not UTF-8")
        }
        return text
    }

    /// A non-negative mpint's magnitude, big-endian without leading zeros, in wiped memory
    /// (the one mpint the agent reads is an ECDSA private scalar). Negative or padded
    /// encodings are refused, as OpenSSH refuses them.
    mutating func unsignedMPInt(_ what: String) throws(KeychainError) -> SecretBytes {
        let raw = try string(what)
        guard let first = raw.first else { return .empty }
        guard first & 0x80 == 0 else { throw KeychainError(.decode, "agent message: \(what) is negative") }
        if first == 0 {
            guard raw.count > 1, raw[raw.startIndex + 1] & 0x80 != 0 else {
                throw KeychainError(.decode, "agent message: \(what) has a needless leading zero")
            }
            return SecretBytes(raw.dropFirst())
        }
        return SecretBytes(raw)
    }

    func expectEnd(_ what: String) throws(KeychainError) {
        guard isAtEnd else { throw KeychainError(.decode, "agent message: \(remaining) bytes after \(what)") }
    }

    private static func truncated(_ what: String) -> KeychainError {
        KeychainError(.decode, "agent message ends where \(what) was expected")
    }
}

/// Builds the SSH wire encoding of answers and key blobs (none of which is secret); public
/// for clients of an agent (the bench's driver).
public struct SSHWriter: Sendable {
    public private(set) var bytes: [UInt8] = []

    public init() {}

    public mutating func byte(_ value: UInt8) { bytes.append(value) }

    public mutating func uint32(_ value: UInt32) {
        bytes += [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
    }

    public mutating func string(_ value: some Collection<UInt8>) {
        uint32(UInt32(value.count))
        bytes += value
    }

    public mutating func string(_ value: String) { string(Array(value.utf8)) }

    /// `magnitude` (big-endian, unsigned) as an mpint: leading zeros dropped, one 0x00 put back
    /// when the top bit is set so the value stays positive, zero as the empty string.
    public mutating func unsignedMPInt(_ magnitude: some Collection<UInt8>) {
        let trimmed = magnitude.drop { $0 == 0 }
        if let first = trimmed.first, first & 0x80 != 0 {
            string([0] + trimmed)
        } else {
            string(Array(trimmed))
        }
    }
}
