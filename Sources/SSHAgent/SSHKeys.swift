import KeychainModel

/// The key types the agent serves: the two the keychain generates and signs with.
public enum SSHKeyType: String, Sendable, CaseIterable {
    case ed25519 = "ssh-ed25519"
    case ecdsaP256 = "ecdsa-sha2-nistp256"

    /// The curve name an ecdsa blob repeats after its type.
    static let p256Curve = "nistp256"

    /// Bytes of the public key inside the blob: Ed25519's A, or P-256's uncompressed point.
    var publicKeyLength: Int { self == .ed25519 ? 32 : 65 }
}

/// A public key as the agent protocol names it: its type and raw public bytes, which encode
/// to the key blob (RFC 8709 §4 for Ed25519, RFC 5656 §3.1 for ECDSA).
public struct SSHPublicKey: Hashable, Sendable, CustomStringConvertible {
    public let type: SSHKeyType
    /// Ed25519: the 32-byte key; P-256: the X9.63 uncompressed point (65 bytes, 04‖X‖Y).
    public let bytes: [UInt8]

    public init(type: SSHKeyType, bytes: [UInt8]) throws(KeychainError) {
        guard bytes.count == type.publicKeyLength, type == .ed25519 || bytes.first == 4 else {
            throw KeychainError(.decode, "\(type.rawValue) public key has the wrong form (\(bytes.count) bytes)")
        }
        self.type = type
        self.bytes = bytes
    }

    /// Parses a key blob; any other type (RSA, certificates, security keys) is errSecUnimplemented.
    public init(blob: [UInt8]) throws(KeychainError) {
        var reader = SSHReader(SecretBytes(blob))
        let name = try reader.text("key type")
        guard let type = SSHKeyType(rawValue: name) else {
            throw KeychainError(.unimplemented, "key type \(name.debugDescription) is not served by this agent")
        }
        if type == .ecdsaP256 {
            guard try reader.text("curve") == SSHKeyType.p256Curve else {
                throw KeychainError(.decode, "ecdsa-sha2-nistp256 key names another curve")
            }
        }
        let key = try reader.publicString("public key")
        try reader.expectEnd("the key blob")
        try self.init(type: type, bytes: key)
    }

    public var blob: [UInt8] {
        var w = SSHWriter()
        w.string(type.rawValue)
        if type == .ecdsaP256 { w.string(SSHKeyType.p256Curve) }
        w.string(bytes)
        return w.bytes
    }

    /// The line `ssh-add -L` prints, without the comment: type and base64 blob.
    public var description: String { type.rawValue + " " + Base64.encode(blob) }
}

/// A private key `ssh-add` sent. The private part stays in wiped memory until the key
/// source hands it to keychaind.
public struct SSHPrivateKey: Sendable {
    public let publicKey: SSHPublicKey
    /// Ed25519: the 32-byte seed; P-256: the 32-byte big-endian scalar.
    public let privateBytes: SecretBytes

    init(publicKey: SSHPublicKey, privateBytes: SecretBytes) {
        self.publicKey = publicKey
        self.privateBytes = privateBytes
    }

    /// Reads the key fields of ADD_IDENTITY after the type name (draft-ietf-sshm-ssh-agent
    /// §4.2.3 / RFC 9987): Ed25519 is `string A`, `string seed‖A`; ECDSA is `string curve`,
    /// `string Q`, `mpint d`.
    static func read(type: SSHKeyType, from reader: inout SSHReader) throws(KeychainError) -> SSHPrivateKey {
        switch type {
        case .ed25519:
            let publicKey = try SSHPublicKey(type: .ed25519, bytes: try reader.publicString("ed25519 public key"))
            let secret = try reader.string("ed25519 private key")
            guard secret.count == 64 else { throw KeychainError(.decode, "ed25519 private key is \(secret.count) bytes, not 64") }
            // The second half repeats the public key: a mismatch means a corrupt or forged add.
            guard Array(secret.suffix(32)) == publicKey.bytes else {
                throw KeychainError(.decode, "ed25519 private key does not carry its public key")
            }
            return SSHPrivateKey(publicKey: publicKey, privateBytes: SecretBytes(secret.prefix(32)))
        case .ecdsaP256:
            guard try reader.text("curve") == SSHKeyType.p256Curve else {
                throw KeychainError(.decode, "ecdsa-sha2-nistp256 key names another curve")
            }
            let publicKey = try SSHPublicKey(type: .ecdsaP256, bytes: try reader.publicString("ecdsa public key"))
            let scalar = try reader.unsignedMPInt("ecdsa private scalar")
            guard !scalar.isEmpty, scalar.count <= 32 else {
                throw KeychainError(.decode, "ecdsa private scalar is out of range for P-256")
            }
            // Left-padded to the curve's 32 bytes, the fixed width keychaind's key form uses.
            let padded = try SecretBytes(count: 32) { (out: UnsafeMutableRawBufferPointer) throws(KeychainError) in
                out.initializeMemory(as: UInt8.self, repeating: 0)
                scalar.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: out[(32 - $0.count)...]).copyMemory(from: $0) }
            }
            return SSHPrivateKey(publicKey: publicKey, privateBytes: padded)
        }
    }
}

/// A signature in the agent's answer: `string type` + `string blob` (RFC 8709 §6; RFC 5656 §3.1.2).
public enum SSHSignature: Sendable, Equatable {
    /// The 64-byte Ed25519 signature.
    case ed25519([UInt8])
    /// ECDSA's r and s as unsigned big-endian integers.
    case ecdsaP256(r: [UInt8], s: [UInt8])

    public var blob: [UInt8] {
        var w = SSHWriter()
        switch self {
        case .ed25519(let raw):
            w.string(SSHKeyType.ed25519.rawValue)
            w.string(raw)
        case .ecdsaP256(let r, let s):
            var inner = SSHWriter()
            inner.unsignedMPInt(r)
            inner.unsignedMPInt(s)
            w.string(SSHKeyType.ecdsaP256.rawValue)
            w.string(inner.bytes)
        }
        return w.bytes
    }

    /// The ECDSA signature keychaind returns (DER `SEQUENCE { INTEGER r, INTEGER s }`, X9.62,
    /// as Apple's SecKeyCreateSignature does) in SSH's form.
    public static func ecdsaP256(der: [UInt8]) throws(KeychainError) -> SSHSignature {
        var reader = DERReader(der)
        var sequence = DERReader(try reader.element(tag: 0x30))
        try reader.expectEnd()
        let r = try sequence.unsignedInteger()
        let s = try sequence.unsignedInteger()
        try sequence.expectEnd()
        guard r.count <= 32, s.count <= 32, !r.isEmpty, !s.isEmpty else {
            throw KeychainError(.decode, "ECDSA signature integers are out of range for P-256")
        }
        return .ecdsaP256(r: r, s: s)
    }

    /// The keychain's form back from SSH's (for verifying an agent's answer in tests and tools).
    public init(blob: [UInt8]) throws(KeychainError) {
        var reader = SSHReader(SecretBytes(blob))
        let name = try reader.text("signature type")
        let body = try reader.publicString("signature")
        try reader.expectEnd("the signature")
        switch SSHKeyType(rawValue: name) {
        case .ed25519:
            guard body.count == 64 else { throw KeychainError(.decode, "ed25519 signature is \(body.count) bytes") }
            self = .ed25519(body)
        case .ecdsaP256:
            var inner = SSHReader(SecretBytes(body))
            let r = Array(try inner.unsignedMPInt("r"))
            let s = Array(try inner.unsignedMPInt("s"))
            try inner.expectEnd("the ECDSA signature")
            self = .ecdsaP256(r: r, s: s)
        case nil:
            throw KeychainError(.unimplemented, "signature type \(name.debugDescription)")
        }
    }
}

/// Just enough DER for an ECDSA signature: short and long definite lengths, no more.
struct DERReader {
    private let bytes: [UInt8]
    private var position = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func element(tag: UInt8) throws(KeychainError) -> [UInt8] {
        guard position + 2 <= bytes.count, bytes[position] == tag else { throw Self.bad }
        var length = Int(bytes[position + 1])
        position += 2
        if length & 0x80 != 0 {
            let octets = length & 0x7f
            guard (1...2).contains(octets), position + octets <= bytes.count else { throw Self.bad }
            length = 0
            for _ in 0..<octets {
                length = length << 8 | Int(bytes[position])
                position += 1
            }
        }
        guard length <= bytes.count - position else { throw Self.bad }
        defer { position += length }
        return Array(bytes[position..<(position + length)])
    }

    /// A positive INTEGER's magnitude without leading zeros.
    mutating func unsignedInteger() throws(KeychainError) -> [UInt8] {
        let value = try element(tag: 0x02)
        guard let first = value.first, first & 0x80 == 0 else { throw Self.bad }
        return Array(value.drop { $0 == 0 })
    }

    func expectEnd() throws(KeychainError) {
        guard position == bytes.count else { throw Self.bad }
    }

    private static var bad: KeychainError { KeychainError(.decode, "malformed DER ECDSA signature") }
}

/// Standard base64 with padding, for `ssh-add -L`-style lines (no Foundation in the CLI).
enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var i = 0
        while i < bytes.count {
            let n = min(3, bytes.count - i)
            let chunk = UInt32(bytes[i]) << 16 | (n > 1 ? UInt32(bytes[i + 1]) << 8 : 0) | (n > 2 ? UInt32(bytes[i + 2]) : 0)
            for j in 0..<4 {
                out.append(j <= n ? alphabet[Int(chunk >> (18 - 6 * UInt32(j)) & 0x3f)] : UInt8(ascii: "="))
            }
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
