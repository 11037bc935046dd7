internal import CLibcrypto
import KeychainModel

/// P-256 ECDSA through OpenSSL's libcrypto, from a stored key's point and scalar as they are.
/// swift-crypto cannot build a signing key without checking it: its import of the X9.63 form
/// runs BoringSSL's EC_KEY_check_key, a second scalar multiplication that cost as much as the
/// signature itself (docs/performance.md, issue 30). The check still runs where a key enters the
/// keychain (`PrivateKey(type:bytes:)`: generation, import, restore), and both AEAD layers of
/// the row authenticate the key's bytes, so a stored key is one that was checked.
enum P256Signer {
    /// The DER X9.62 signature of a 32-byte digest by a stored key (65-byte point ‖ 32-byte
    /// scalar, `PrivateKey.bytes`).
    static func signature(ofDigest digest: [UInt8], key stored: SecretBytes) throws(KeychainError) -> [UInt8] {
        precondition(stored.count == 97 && digest.count == 32, "a stored P-256 key and a SHA-256 digest")
        // OSSL_PARAM's unsigned integers are native-endian: the scalar's copy in that order is
        // wiped memory as well.
        let scalar = SecretBytes(count: 32) { out in
            stored.withUnsafeBytes { key in
                for i in 0..<32 {
                    #if _endian(little)
                    out[i] = key[96 - i]
                    #else
                    out[i] = key[65 + i]
                    #endif
                }
            }
        }
        var signature = [UInt8](repeating: 0, count: 80)  // DER of two 33-byte integers: at most 72
        var length = signature.count
        let ok = stored.withUnsafeBytes { key in
            scalar.withUnsafeBytes { s in
                digest.withUnsafeBufferPointer { d in
                    keychaind_p256_sign_digest(key.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                               s.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                               d.baseAddress, d.count, &signature, &length)
                }
            }
        }
        guard ok == 1 else { throw KeychainError(.internal, "P-256 signing failed") }
        return Array(signature.prefix(length))
    }
}
