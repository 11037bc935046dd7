internal import CSodium
import KeychainModel

/// libsodium must be initialised once before any other call; a Swift global is initialised
/// lazily and exactly once, thread-safely.
private let sodiumInitialised: Bool = sodium_init() >= 0

/// The small set of libsodium primitives the keychain uses. Every C pointer in the target goes
/// through this file or SecureKey; callers see Swift arrays and SecureKey only.
public enum Sodium {
    static func ensureInitialised() {
        precondition(sodiumInitialised, "libsodium failed to initialise")
    }

    public static func randomBytes(_ count: Int) -> [UInt8] {
        ensureInitialised()
        var out = [UInt8](repeating: 0, count: count)
        out.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, count) }
        return out
    }

    /// Overwrites a buffer that held key material or a secret, in a way the optimiser keeps.
    public static func wipe(_ bytes: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeMutableBytes { sodium_memzero($0.baseAddress!, $0.count) }
    }

    /// Constant-time comparison, for anything derived from a secret.
    public static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { pa in b.withUnsafeBytes { pb in
            sodium_memcmp(pa.baseAddress!, pb.baseAddress!, a.count) == 0
        } }
    }
}

/// XChaCha20-Poly1305 (IETF): 24-byte random nonces, so per-message random nonces are safe.
public enum AEAD {
    public static let nonceBytes = Int(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES)
    public static let tagBytes = Int(crypto_aead_xchacha20poly1305_ietf_ABYTES)
    public static let keyBytes = Int(crypto_aead_xchacha20poly1305_ietf_KEYBYTES)

    /// Returns nonce || ciphertext || tag, under a fresh random nonce.
    public static func seal(_ plaintext: some ContiguousByteBuffer, associatedData ad: [UInt8], key: SecureKey) -> [UInt8] {
        seal(plaintext, associatedData: ad, key: key, nonce: Sodium.randomBytes(nonceBytes))
    }

    public static func seal(_ plaintext: some ContiguousByteBuffer, associatedData ad: [UInt8], rawKey: some ContiguousByteBuffer) -> [UInt8] {
        seal(plaintext, associatedData: ad, rawKey: rawKey, nonce: Sodium.randomBytes(nonceBytes))
    }

    // Internal with a given nonce: only golden-vector tests (@testable) pass one, to
    // reproduce a stored format byte for byte. Every caller in the product takes a random one.
    static func seal(_ plaintext: some ContiguousByteBuffer, associatedData ad: [UInt8], key: SecureKey, nonce: [UInt8]) -> [UInt8] {
        key.withUnsafeBytes { k in plaintext.withUnsafeBytes { seal($0, associatedData: ad, keyPointer: k, nonce: nonce) } }
    }

    static func seal(_ plaintext: some ContiguousByteBuffer, associatedData ad: [UInt8], rawKey: some ContiguousByteBuffer, nonce: [UInt8]) -> [UInt8] {
        precondition(rawKey.count == keyBytes)
        return rawKey.withUnsafeBytes { k in plaintext.withUnsafeBytes { seal($0, associatedData: ad, keyPointer: k, nonce: nonce) } }
    }

    /// Opens nonce || ciphertext || tag into wiped memory; nil when the tag does not verify
    /// (wrong key, altered bytes or altered associated data).
    public static func open(_ sealed: [UInt8], associatedData ad: [UInt8], key: SecureKey) -> SecretBytes? {
        key.withUnsafeBytes { open(sealed, associatedData: ad, keyPointer: $0) }
    }

    public static func open(_ sealed: [UInt8], associatedData ad: [UInt8], rawKey: some ContiguousByteBuffer) -> SecretBytes? {
        precondition(rawKey.count == keyBytes)
        return rawKey.withUnsafeBytes { open(sealed, associatedData: ad, keyPointer: $0) }
    }

    private static func seal(_ m: UnsafeRawBufferPointer, associatedData ad: [UInt8], keyPointer k: UnsafeRawBufferPointer, nonce: [UInt8]) -> [UInt8] {
        Sodium.ensureInitialised()
        precondition(nonce.count == nonceBytes)
        var out = [UInt8](repeating: 0, count: nonceBytes + m.count + tagBytes)
        var written: UInt64 = 0
        let rc = out.withUnsafeMutableBufferPointer { o in
            ad.withUnsafeBufferPointer { a in
                nonce.withUnsafeBufferPointer { n in
                    o.baseAddress!.initialize(from: n.baseAddress!, count: nonceBytes)
                    return crypto_aead_xchacha20poly1305_ietf_encrypt(
                        o.baseAddress! + nonceBytes, &written,
                        m.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(m.count), a.baseAddress, UInt64(a.count),
                        nil, n.baseAddress!, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        precondition(rc == 0 && Int(written) == m.count + tagBytes)
        return out
    }

    private static func open(_ sealed: [UInt8], associatedData ad: [UInt8], keyPointer k: UnsafeRawBufferPointer) -> SecretBytes? {
        Sodium.ensureInitialised()
        guard sealed.count >= nonceBytes + tagBytes else { return nil }
        var written: UInt64 = 0
        var rc: Int32 = -1
        // The plaintext is decrypted straight into wiped memory, which is zeroed on failure
        // too when it is released.
        let out = SecretBytes(count: sealed.count - nonceBytes - tagBytes) { o in
            rc = sealed.withUnsafeBufferPointer { c in
                ad.withUnsafeBufferPointer { a in
                    crypto_aead_xchacha20poly1305_ietf_decrypt(
                        o.baseAddress!.assumingMemoryBound(to: UInt8.self), &written, nil,
                        c.baseAddress! + nonceBytes, UInt64(c.count - nonceBytes),
                        a.baseAddress, UInt64(a.count),
                        c.baseAddress!, k.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
        }
        return rc == 0 ? out : nil
    }
}

/// Keyed BLAKE2b: the lookup-column hashes and the passcode tangling.
public enum KeyedHash {
    /// BLAKE2b(key, domain || 0x00 || message), streamed: no concatenated copy per lookup.
    public static func hash(domain: String, _ message: [UInt8], key: SecureKey, outputBytes: Int) -> [UInt8] {
        Sodium.ensureInitialised()
        var out = [UInt8](repeating: 0, count: outputBytes)
        // The state is 64-byte aligned in C, so Swift sees it as opaque: keep it on the stack.
        withUnsafeTemporaryAllocation(byteCount: crypto_generichash_statebytes(), alignment: 64) { raw in
            let state = OpaquePointer(raw.baseAddress!)
            key.withUnsafeBytes { k in
                _ = crypto_generichash_init(state, k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count, outputBytes)
            }
            var d = domain
            d.withUTF8 { _ = crypto_generichash_update(state, $0.baseAddress, UInt64($0.count)) }
            var separator: UInt8 = 0
            _ = crypto_generichash_update(state, &separator, 1)
            message.withUnsafeBufferPointer { _ = crypto_generichash_update(state, $0.baseAddress, UInt64($0.count)) }
            out.withUnsafeMutableBufferPointer { _ = crypto_generichash_final(state, $0.baseAddress!, outputBytes) }
            sodium_memzero(raw.baseAddress!, raw.count)
        }
        return out
    }

    public static func hash(_ message: [UInt8], key: SecureKey, outputBytes: Int = 16) -> [UInt8] {
        Sodium.ensureInitialised()
        var out = [UInt8](repeating: 0, count: outputBytes)
        key.withUnsafeBytes { k in
            message.withUnsafeBufferPointer { m in
                out.withUnsafeMutableBufferPointer { o in
                    _ = crypto_generichash(o.baseAddress!, outputBytes, m.baseAddress, UInt64(m.count),
                                           k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
                }
            }
        }
        return out
    }
}

/// libsodium's sealed box to an X25519 key (crypto_box_seal): an ephemeral X25519 key, its
/// public half first, then XSalsa20-Poly1305 under the key both sides derive. Anyone with the
/// public key can seal; only the private key opens, and the sender stays anonymous.
public enum X25519SealedBox {
    public static let keyBytes = Int(crypto_box_publickeybytes())
    /// Ephemeral public key plus the Poly1305 tag.
    public static let overheadBytes = Int(crypto_box_sealbytes())

    /// Fails with errSecParam for a public key of the wrong length or of small order (one
    /// whose shared secret would be all zero, which libsodium refuses).
    public static func seal(_ plaintext: some ContiguousByteBuffer, to publicKey: [UInt8]) throws(KeychainError) -> [UInt8] {
        Sodium.ensureInitialised()
        guard publicKey.count == keyBytes else {
            throw KeychainError(.param, "an X25519 public key is \(keyBytes) bytes, not \(publicKey.count)")
        }
        var out = [UInt8](repeating: 0, count: plaintext.count + overheadBytes)
        let rc = out.withUnsafeMutableBufferPointer { o in
            plaintext.withUnsafeBytes { m in
                publicKey.withUnsafeBufferPointer { pk in
                    crypto_box_seal(o.baseAddress!, m.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(m.count), pk.baseAddress!)
                }
            }
        }
        guard rc == 0 else { throw KeychainError(.param, "the X25519 public key is not usable for a sealed box") }
        return out
    }

    /// Opens into wiped memory. Every failure (too short, wrong key, altered bytes) is the
    /// same errSecParam, as Apple reports a failed decryption, so the answer tells nothing
    /// about which byte was wrong.
    public static func open(_ sealed: [UInt8], privateKey: some ContiguousByteBuffer) throws(KeychainError) -> SecretBytes {
        Sodium.ensureInitialised()
        guard privateKey.count == keyBytes else {
            throw KeychainError(.param, "an X25519 private key is \(keyBytes) bytes, not \(privateKey.count)")
        }
        guard sealed.count >= overheadBytes else {
            throw KeychainError(.param, "a sealed box is at least \(overheadBytes) bytes")
        }
        var rc: Int32 = -1
        let plaintext = SecretBytes(count: sealed.count - overheadBytes) { m in
            privateKey.withUnsafeBytes { sk in
                let secret = sk.baseAddress!.assumingMemoryBound(to: UInt8.self)
                // crypto_box_seal_open wants the recipient's public key too (it is hashed
                // into the nonce); derive it rather than trust a second argument to match.
                var publicKey = [UInt8](repeating: 0, count: keyBytes)
                guard crypto_scalarmult_base(&publicKey, secret) == 0 else { return }
                rc = sealed.withUnsafeBufferPointer { c in
                    crypto_box_seal_open(m.baseAddress?.assumingMemoryBound(to: UInt8.self), c.baseAddress!, UInt64(c.count),
                                         publicKey, secret)
                }
            }
        }
        guard rc == 0 else { throw KeychainError(.param, "the sealed box does not open with this key (wrong key or altered bytes)") }
        return plaintext
    }
}

/// Unkeyed BLAKE2b-256: identities and chain links built from public bytes only.
public enum PublicHash {
    public static let outputBytes = 32

    public static func blake2b256(_ parts: [UInt8]...) -> [UInt8] {
        Sodium.ensureInitialised()
        var out = [UInt8](repeating: 0, count: outputBytes)
        withUnsafeTemporaryAllocation(byteCount: crypto_generichash_statebytes(), alignment: 64) { raw in
            let state = OpaquePointer(raw.baseAddress!)
            _ = crypto_generichash_init(state, nil, 0, outputBytes)
            for part in parts {
                part.withUnsafeBufferPointer { _ = crypto_generichash_update(state, $0.baseAddress, UInt64($0.count)) }
            }
            out.withUnsafeMutableBufferPointer { _ = crypto_generichash_final(state, $0.baseAddress!, outputBytes) }
        }
        return out
    }
}

/// Ed25519 with the 32-byte seed as the secret: the seed fits a SecureKey, and libsodium's
/// 64-byte secret key is rebuilt from it for each signature (signatures are rare: roster
/// entries, key wraps, heads) in wiped stack memory.
public enum Ed25519 {
    public static let publicKeyBytes = Int(crypto_sign_PUBLICKEYBYTES)
    public static let signatureBytes = Int(crypto_sign_BYTES)

    public static func publicKey(seed: SecureKey) -> [UInt8] {
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        withSecretKey(seed: seed) { _, derived in pk = derived }
        return pk
    }

    public static func sign(_ message: [UInt8], seed: SecureKey) -> [UInt8] {
        var sig = [UInt8](repeating: 0, count: signatureBytes)
        withSecretKey(seed: seed) { sk, _ in
            message.withUnsafeBufferPointer { m in
                sig.withUnsafeMutableBufferPointer { s in
                    _ = crypto_sign_detached(s.baseAddress!, nil, m.baseAddress, UInt64(m.count), sk)
                }
            }
        }
        return sig
    }

    /// libsodium's verification, which also refuses non-canonical and small-order encodings.
    public static func verify(_ signature: [UInt8], of message: [UInt8], publicKey: [UInt8]) -> Bool {
        Sodium.ensureInitialised()
        guard signature.count == signatureBytes, publicKey.count == publicKeyBytes else { return false }
        return signature.withUnsafeBufferPointer { s in
            message.withUnsafeBufferPointer { m in
                publicKey.withUnsafeBufferPointer { p in
                    crypto_sign_verify_detached(s.baseAddress!, m.baseAddress, UInt64(m.count), p.baseAddress!) == 0
                }
            }
        }
    }

    private static func withSecretKey(seed: SecureKey, _ body: (UnsafePointer<UInt8>, [UInt8]) -> Void) {
        Sodium.ensureInitialised()
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        withUnsafeTemporaryAllocation(byteCount: Int(crypto_sign_SECRETKEYBYTES), alignment: 16) { sk in
            let skPointer = sk.baseAddress!.assumingMemoryBound(to: UInt8.self)
            seed.withUnsafeBytes { s in
                pk.withUnsafeMutableBufferPointer { p in
                    _ = crypto_sign_seed_keypair(p.baseAddress!, skPointer, s.baseAddress!.assumingMemoryBound(to: UInt8.self))
                }
            }
            body(UnsafePointer(skPointer), pk)
            sodium_memzero(sk.baseAddress!, sk.count)
        }
    }
}

/// X25519 key agreement (crypto_scalarmult): the secret scalar is a SecureKey, and so is
/// the shared point.
public enum X25519 {
    public static let publicKeyBytes = Int(crypto_scalarmult_BYTES)

    public static func publicKey(secret: SecureKey) -> [UInt8] {
        Sodium.ensureInitialised()
        var pk = [UInt8](repeating: 0, count: publicKeyBytes)
        secret.withUnsafeBytes { s in
            pk.withUnsafeMutableBufferPointer { p in
                _ = crypto_scalarmult_base(p.baseAddress!, s.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        return pk
    }

    /// The shared point with `publicKey`, or nil when it is all zeros (a small-order public
    /// key, which would make the "shared" secret known to anyone).
    public static func sharedSecret(_ secret: SecureKey, _ publicKey: [UInt8]) -> SecureKey? {
        Sodium.ensureInitialised()
        guard publicKey.count == publicKeyBytes else { return nil }
        var rc: Int32 = -1
        let shared = SecureKey { dst in
            secret.withUnsafeBytes { s in
                publicKey.withUnsafeBufferPointer { p in
                    rc = crypto_scalarmult(dst.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                           s.baseAddress!.assumingMemoryBound(to: UInt8.self), p.baseAddress!)
                }
            }
        }
        return rc == 0 ? shared : nil
    }
}
