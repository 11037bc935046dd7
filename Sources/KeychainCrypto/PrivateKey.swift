internal import CSodium
import Crypto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import KeychainModel

/// A private key held by the daemon, in the form the keychain stores it (docs/keys.md): a raw
/// 32-byte Ed25519 seed or X25519 scalar, or P-256's X9.63 public point then scalar (97 bytes,
/// Apple's SecKeyCopyExternalRepresentation form). Its bytes live only in wiped memory here;
/// swift-crypto's own copies live in its key objects, which exist for one call at a time.
public struct PrivateKey: Sendable {
    public let type: KeyType
    /// The stored form; never leaves the daemon for a non-extractable key.
    public let bytes: SecretBytes

    /// The public key, as the contract ships it: raw 32 bytes or an X9.63 uncompressed point.
    /// Computed when asked (a scalar multiplication for the 25519 keys; P-256's is stored).
    public var publicKey: [UInt8] {
        switch type {
        case .ed25519: Curve25519Keys.ed25519PublicKey(seed: bytes)
        case .x25519: Curve25519Keys.x25519PublicKey(scalar: bytes)
        case .p256: Array(bytes.prefix(65))
        }
    }

    /// A key as the keychain stored it, after `init(type:bytes:)` checked it: its row is
    /// authenticated, so using it needs no second check (and no scalar multiplication: a P-256
    /// signature takes the stored point as it is, `P256Signer`).
    public init(stored bytes: SecretBytes, type: KeyType) throws(KeychainError) {
        guard bytes.count == type.privateKeyBytes else {
            throw KeychainError(.decode, "a stored \(type.rawValue) private key is \(bytes.count) bytes")
        }
        self.type = type
        self.bytes = bytes
    }

    /// Checks `bytes` as a private key of `type` and derives its public key. errSecParam for
    /// a malformed key: wrong length, a P-256 scalar out of range, or a P-256 point that is not
    /// the scalar's.
    public init(type: KeyType, bytes: SecretBytes) throws(KeychainError) {
        guard bytes.count == type.privateKeyBytes else {
            throw KeychainError(.param, "a \(type.rawValue) private key is \(type.privateKeyBytes) bytes, not \(bytes.count)")
        }
        self.type = type
        self.bytes = bytes
        if type == .p256 {
            let point = Array(try Self.p256Signing(bytes).publicKey.x963Representation)
            // The point is stored beside the scalar: one that is not the scalar's would make
            // klbl and the public key lie about the key.
            guard Sodium.constantTimeEqual(point, Array(bytes.prefix(65))) else {
                throw KeychainError(.param, "the P-256 key's public point is not its scalar's")
            }
        }
    }

    /// A fresh random key of `type`.
    public static func generate(_ type: KeyType) -> PrivateKey {
        let bytes: SecretBytes
        switch type {
        case .ed25519, .x25519:
            bytes = SecretBytes(count: 32) { randombytesInto($0) }
        case .p256:
            var x963 = P256.Signing.PrivateKey(compactRepresentable: false).x963Representation
            bytes = SecretBytes(x963)
            wipe(&x963)
        }
        // A key just made is well formed; a failure here is a bug, not bad input.
        guard let key = try? PrivateKey(type: type, bytes: bytes) else { preconditionFailure("a generated \(type) key does not validate") }
        return key
    }

    /// SHA-1 of the public key: the `klbl` (kSecAttrApplicationLabel) Apple gives a key.
    public var applicationLabel: [UInt8] { Array(Insecure.SHA1.hash(data: publicKey)) }

    // MARK: operations

    /// A signature of `data` with `algorithm`. errSecParam when the algorithm is not this
    /// key's (Apple: "algorithm not supported by the key") or a digest has the wrong size.
    public func sign(_ data: [UInt8], algorithm: KeySigningAlgorithm) throws(KeychainError) -> [UInt8] {
        try checkSigning(algorithm)
        switch algorithm {
        case .ed25519:
            return Curve25519Keys.ed25519Sign(data, seed: bytes)
        case .ecdsaMessageX962SHA256:
            return try P256Signer.signature(ofDigest: Array(SHA256.hash(data: data)), key: bytes)
        case .ecdsaDigestX962SHA256:
            guard data.count == SHA256Digest.byteCount else {
                throw KeychainError(.param, "\(algorithm.rawValue) signs a 32-byte SHA-256 digest, not \(data.count) bytes")
            }
            return try P256Signer.signature(ofDigest: data, key: bytes)
        }
    }

    /// The shared secret with `peer` (raw 32 bytes, or an X9.63 point for P-256), through the
    /// X9.63 KDF when `algorithm` asks for it. errSecParam for a malformed or low-order peer.
    public func agree(with peer: [UInt8], algorithm: KeyAgreementAlgorithm, requestedSize: Int?,
                      sharedInfo: [UInt8]) throws(KeychainError) -> SecretBytes {
        guard type.agrees else {
            throw KeychainError(.param, "\(algorithm.rawValue): algorithm not supported by a \(type.rawValue) key")
        }
        guard peer.count == type.publicKeyBytes else {
            throw KeychainError(.param, "a \(type.rawValue) peer public key is \(type.publicKeyBytes) bytes, not \(peer.count)")
        }
        let shared: SecretBytes
        switch type {
        case .x25519:
            guard let secret = Curve25519Keys.x25519(scalar: bytes, point: peer) else {
                throw KeychainError(.param, "the X25519 peer key is a low-order point")
            }
            shared = secret
        case .p256:
            let peerKey: P256.KeyAgreement.PublicKey
            do {
                peerKey = try P256.KeyAgreement.PublicKey(x963Representation: peer)
            } catch {
                throw KeychainError(.param, "the P-256 peer key is not a point on the curve")
            }
            let ours = try Self.p256Agreement(bytes)
            do {
                let secret = try ours.sharedSecretFromKeyAgreement(with: peerKey)
                shared = secret.withUnsafeBytes { SecretBytes($0) }
            } catch {
                throw KeychainError(.param, "P-256 key agreement failed")
            }
        case .ed25519:
            preconditionFailure("checked above")
        }
        switch algorithm {
        case .standard:
            guard requestedSize == nil || requestedSize == shared.count else {
                throw KeychainError(.param, "\(algorithm.rawValue) gives the \(shared.count)-byte shared secret; requestedSize applies to the KDF algorithms")
            }
            return shared
        case .standardX963SHA256:
            guard let size = requestedSize, size > 0, size <= 1 << 16 else {
                throw KeychainError(.param, "\(algorithm.rawValue) needs a requestedSize of 1 to 65536 bytes")
            }
            return X963KDF.sha256(shared, sharedInfo: sharedInfo, outputBytes: size)
        }
    }

    private func checkSigning(_ algorithm: KeySigningAlgorithm) throws(KeychainError) {
        guard algorithm.keyType == type else {
            throw KeychainError(.param, "\(algorithm.rawValue): algorithm not supported by a \(type.rawValue) key")
        }
    }

    // MARK: P-256 through swift-crypto

    private static func p256Signing(_ bytes: SecretBytes) throws(KeychainError) -> P256.Signing.PrivateKey {
        do {
            return try bytes.withUnsafeBytes { try P256.Signing.PrivateKey(x963Representation: $0) }
        } catch {
            throw KeychainError(.param, "the bytes are not a P-256 private key in X9.63 form")
        }
    }

    private static func p256Agreement(_ bytes: SecretBytes) throws(KeychainError) -> P256.KeyAgreement.PrivateKey {
        do {
            return try bytes.withUnsafeBytes { try P256.KeyAgreement.PrivateKey(x963Representation: $0) }
        } catch {
            throw KeychainError(.param, "the bytes are not a P-256 private key in X9.63 form")
        }
    }

    private static func randombytesInto(_ buffer: UnsafeMutableRawBufferPointer) {
        Sodium.ensureInitialised()
        randombytes_buf(buffer.baseAddress!, buffer.count)
    }

    private static func wipe(_ data: inout Data) {
        data.withUnsafeMutableBytes { if let base = $0.baseAddress { sodium_memzero(base, $0.count) } }
    }
}

/// Verification needs only the public key: any caller's bytes, no keychain item.
public enum PublicKeyVerifier {
    /// Whether `signature` is a valid `algorithm` signature of `data` under `publicKey`.
    /// errSecParam when the algorithm does not fit the key type or the public key is malformed.
    public static func verify(_ signature: [UInt8], of data: [UInt8], publicKey: [UInt8], type: KeyType,
                              algorithm: KeySigningAlgorithm) throws(KeychainError) -> Bool {
        guard algorithm.keyType == type else {
            throw KeychainError(.param, "\(algorithm.rawValue): algorithm not supported by a \(type.rawValue) key")
        }
        guard publicKey.count == type.publicKeyBytes else {
            throw KeychainError(.param, "a \(type.rawValue) public key is \(type.publicKeyBytes) bytes, not \(publicKey.count)")
        }
        switch algorithm {
        case .ed25519:
            return Curve25519Keys.ed25519Verify(signature, of: data, publicKey: publicKey)
        case .ecdsaMessageX962SHA256, .ecdsaDigestX962SHA256:
            let key: P256.Signing.PublicKey
            do {
                key = try P256.Signing.PublicKey(x963Representation: publicKey)
            } catch {
                throw KeychainError(.param, "the public key is not a P-256 point")
            }
            guard let sig = try? P256.Signing.ECDSASignature(derRepresentation: signature) else { return false }
            if algorithm == .ecdsaMessageX962SHA256 { return key.isValidSignature(sig, for: data) }
            guard data.count == SHA256Digest.byteCount else {
                throw KeychainError(.param, "\(algorithm.rawValue) verifies a 32-byte SHA-256 digest, not \(data.count) bytes")
            }
            return key.isValidSignature(sig, for: GivenDigest(bytes: data))
        }
    }
}

/// A digest the caller computed (kSecKeyAlgorithm...Digest...): swift-crypto signs any Digest,
/// and has no public way to make its own from bytes.
private struct GivenDigest: Digest {
    static var byteCount: Int { 32 }
    let bytes: [UInt8]

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R { try bytes.withUnsafeBytes(body) }
    func makeIterator() -> IndexingIterator<[UInt8]> { bytes.makeIterator() }
    var description: String { "digest(\(bytes.count) bytes)" }
}

/// ANSI X9.63 KDF (SEC 1 3.6.1) with SHA-256: SHA-256(Z ‖ counter ‖ sharedInfo) for counter
/// 1, 2, ... (32-bit big-endian), cut to the size asked for. Apple's ...X963SHA256 algorithms.
enum X963KDF {
    static func sha256(_ secret: SecretBytes, sharedInfo: [UInt8], outputBytes: Int) -> SecretBytes {
        var out = ByteWriter(capacity: outputBytes + 32)
        var counter: UInt32 = 1
        while out.count < outputBytes {
            var hasher = SHA256()
            secret.withUnsafeBytes { hasher.update(bufferPointer: $0) }
            withUnsafeBytes(of: counter.bigEndian) { hasher.update(bufferPointer: $0) }
            hasher.update(data: sharedInfo)
            let block = hasher.finalize()
            let take = outputBytes - out.count
            block.withUnsafeBytes { out.raw(UnsafeRawBufferPointer(rebasing: $0.prefix(take))) }
            counter += 1
        }
        return out.finish()
    }
}

/// Ed25519 and X25519 through libsodium. Secret inputs and the 64-byte libsodium signing key
/// stay in wiped memory.
enum Curve25519Keys {
    static func ed25519PublicKey(seed: SecretBytes) -> [UInt8] {
        Sodium.ensureInitialised()
        var pk = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        _ = SecretBytes(count: Int(crypto_sign_SECRETKEYBYTES)) { sk in
            seed.withUnsafeBytes { s in
                _ = crypto_sign_seed_keypair(&pk, sk.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                             s.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        return pk
    }

    static func ed25519Sign(_ message: [UInt8], seed: SecretBytes) -> [UInt8] {
        Sodium.ensureInitialised()
        var pk = [UInt8](repeating: 0, count: Int(crypto_sign_PUBLICKEYBYTES))
        var signature = [UInt8](repeating: 0, count: Int(crypto_sign_BYTES))
        _ = SecretBytes(count: Int(crypto_sign_SECRETKEYBYTES)) { sk in
            let skp = sk.baseAddress!.assumingMemoryBound(to: UInt8.self)
            seed.withUnsafeBytes { s in
                _ = crypto_sign_seed_keypair(&pk, skp, s.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
            message.withUnsafeBufferPointer { m in
                _ = crypto_sign_detached(&signature, nil, m.baseAddress, UInt64(m.count), skp)
            }
        }
        return signature
    }

    static func ed25519Verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        Sodium.ensureInitialised()
        guard signature.count == Int(crypto_sign_BYTES) else { return false }
        return message.withUnsafeBufferPointer { m in
            crypto_sign_verify_detached(signature, m.baseAddress, UInt64(m.count), publicKey) == 0
        }
    }

    static func x25519PublicKey(scalar: SecretBytes) -> [UInt8] {
        Sodium.ensureInitialised()
        var pk = [UInt8](repeating: 0, count: Int(crypto_scalarmult_BYTES))
        scalar.withUnsafeBytes { s in
            _ = crypto_scalarmult_base(&pk, s.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return pk
    }

    /// nil when the result is all zeros (a low-order peer point), which libsodium refuses.
    static func x25519(scalar: SecretBytes, point: [UInt8]) -> SecretBytes? {
        Sodium.ensureInitialised()
        var rc: Int32 = -1
        let out = SecretBytes(count: Int(crypto_scalarmult_BYTES)) { q in
            scalar.withUnsafeBytes { s in
                rc = crypto_scalarmult(q.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                       s.baseAddress!.assumingMemoryBound(to: UInt8.self), point)
            }
        }
        return rc == 0 ? out : nil
    }
}
