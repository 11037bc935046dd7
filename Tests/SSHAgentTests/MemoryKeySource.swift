import Crypto
import KeychainModel
import SSHAgent
import Synchronization

/// A key source that keeps keys in memory and signs with swift-crypto: the agent's protocol
/// and server are specified against it, apart from keychaind.
final class MemoryKeySource: AgentKeySource {
    private let keys = Mutex<[(identity: AgentIdentity, privateBytes: SecretBytes)]>([])
    /// When set, every call fails with it (a locked or unreachable keychain).
    let failure = Mutex<KeychainError?>(nil)
    /// Keys added with ssh-add -c, and the reason of each signature, as the agent gave them.
    let confirmed = Mutex<Set<SSHPublicKey>>([])
    let reasons = Mutex<[String]>([])

    func identities() throws(KeychainError) -> [AgentIdentity] {
        if let error = failure.withLock({ $0 }) { throw error }
        return keys.withLock { $0.map(\.identity) }
    }

    func sign(_ data: [UInt8], with key: SSHPublicKey, reason: String) throws(KeychainError) -> SSHSignature {
        if let error = failure.withLock({ $0 }) { throw error }
        reasons.withLock { $0.append(reason) }
        guard let secret = keys.withLock({ $0.first { $0.identity.key == key }?.privateBytes }) else {
            throw KeychainError(.itemNotFound, "no such key")
        }
        do {
            switch key.type {
            case .ed25519:
                let signer = try Curve25519.Signing.PrivateKey(rawRepresentation: Array(secret))
                return .ed25519(Array(try signer.signature(for: data)))
            case .ecdsaP256:
                let signer = try P256.Signing.PrivateKey(rawRepresentation: Array(secret))
                return try SSHSignature.ecdsaP256(der: Array(try signer.signature(for: data).derRepresentation))
            }
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(.internal, "swift-crypto: \(error)")
        }
    }

    func add(_ key: SSHPrivateKey, comment: String, confirmEachUse: Bool) throws(KeychainError) {
        if let error = failure.withLock({ $0 }) { throw error }
        if confirmEachUse { confirmed.withLock { _ = $0.insert(key.publicKey) } }
        try keys.withLock { (list) throws(KeychainError) in
            guard !list.contains(where: { $0.identity.key == key.publicKey }) else { throw KeychainError(.duplicateItem, "present") }
            list.append((AgentIdentity(key: key.publicKey, comment: comment), key.privateBytes))
        }
    }

    var count: Int { keys.withLock { $0.count } }
}

/// Fresh keys and the ADD_IDENTITY messages ssh-add would send for them.
enum TestKeys {
    static func ed25519() -> (Curve25519.Signing.PrivateKey, SSHPublicKey) {
        let k = Curve25519.Signing.PrivateKey()
        return (k, try! SSHPublicKey(type: .ed25519, bytes: Array(k.publicKey.rawRepresentation)))
    }

    static func p256() -> (P256.Signing.PrivateKey, SSHPublicKey) {
        let k = P256.Signing.PrivateKey()
        return (k, try! SSHPublicKey(type: .ecdsaP256, bytes: Array(k.publicKey.x963Representation)))
    }

    static func addMessage(_ key: Curve25519.Signing.PrivateKey, comment: String, constraints: [UInt8] = []) -> [UInt8] {
        let pub = Array(key.publicKey.rawRepresentation)
        var m = Wire()
        m.byte(constraints.isEmpty ? 17 : 25)
        m.string(Array("ssh-ed25519".utf8))
        m.string(pub)
        m.string(Array(key.rawRepresentation) + pub)
        m.string(Array(comment.utf8))
        m.bytes += constraints
        return m.bytes
    }

    static func addMessage(_ key: P256.Signing.PrivateKey, comment: String) -> [UInt8] {
        var m = Wire()
        m.byte(17)
        m.string(Array("ecdsa-sha2-nistp256".utf8))
        m.string(Array("nistp256".utf8))
        m.string(Array(key.publicKey.x963Representation))
        m.mpint(Array(key.rawRepresentation))
        m.string(Array(comment.utf8))
        return m.bytes
    }

    static func signMessage(_ key: SSHPublicKey, _ data: [UInt8], flags: UInt32 = 0) -> [UInt8] {
        var m = Wire()
        m.byte(13)
        m.string(key.blob)
        m.string(data)
        m.uint32(flags)
        return m.bytes
    }

    /// Checks an agent's signature with swift-crypto, as sshd would.
    static func verifies(_ signature: SSHSignature, _ data: [UInt8], by key: SSHPublicKey) -> Bool {
        switch (signature, key.type) {
        case (.ed25519(let raw), .ed25519):
            guard let pub = try? Curve25519.Signing.PublicKey(rawRepresentation: key.bytes) else { return false }
            return pub.isValidSignature(raw, for: data)
        case (.ecdsaP256(let r, let s), .ecdsaP256):
            guard r.count <= 32, s.count <= 32,
                  let pub = try? P256.Signing.PublicKey(x963Representation: key.bytes),
                  let sig = try? P256.Signing.ECDSASignature(rawRepresentation: pad(r) + pad(s)) else { return false }
            return pub.isValidSignature(sig, for: data)
        default:
            return false
        }
    }

    static func pad(_ b: [UInt8]) -> [UInt8] { [UInt8](repeating: 0, count: 32 - b.count) + b }
}

/// A test's own SSH wire writer, kept apart from the one under test.
struct Wire {
    var bytes: [UInt8] = []
    mutating func byte(_ b: UInt8) { bytes.append(b) }
    mutating func uint32(_ v: UInt32) { bytes += [UInt8(v >> 24), UInt8(v >> 16 & 0xff), UInt8(v >> 8 & 0xff), UInt8(v & 0xff)] }
    mutating func string(_ s: [UInt8]) { uint32(UInt32(s.count)); bytes += s }
    mutating func mpint(_ magnitude: [UInt8]) {
        var m = Array(magnitude.drop { $0 == 0 })
        if let f = m.first, f & 0x80 != 0 { m.insert(0, at: 0) }
        string(m)
    }
}
