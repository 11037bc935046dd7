internal import CLibcrypto
import KeychainModel

/// The crypto of the Secret Service's `dh-ietf1024-sha256-aes128-cbc-pkcs7` sessions, as
/// libsecret, secretstorage and gnome-keyring do it: DH in RFC 2409's second Oakley group
/// (g = 2), the shared value left-padded to 128 bytes, HKDF-SHA256 with no salt and no info to
/// a 16-byte key, then AES-128-CBC with PKCS#7 and a fresh IV per secret. The only user of
/// libcrypto; exponents, shared values and keys never leave wiped memory (SecretBytes,
/// BN_clear_free).
enum SessionCrypto {
    static let publicValueLength = 128
    static let keyLength = 16
    static let ivLength = 16

    /// The server's half of the key agreement for a client public value (big-endian, 1–128
    /// bytes: libsecret and older secretstorage drop leading zeros). Returns the server's
    /// public value, padded to 128 bytes, and the session key.
    static func agree(clientPublic: [UInt8]) throws(KeychainError) -> (serverPublic: [UInt8], key: SecretBytes) {
        let exponent = try SecretBytes(count: publicValueLength) { (buffer) throws(KeychainError) in
            guard RAND_priv_bytes(buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == 1 else {
                throw KeychainError(.internal, "libcrypto's random generator failed")
            }
        }
        let (serverPublic, z) = try agreement(clientPublic: clientPublic, exponent: exponent)
        return (serverPublic, try hkdf(z))
    }

    /// The server's public value and the shared value Z (left-padded to 128 bytes) for a
    /// given private exponent: apart from `agree` so that tests can reach a short Z.
    static func agreement(clientPublic: [UInt8], exponent exponentBytes: SecretBytes) throws(KeychainError) -> (serverPublic: [UInt8], z: SecretBytes) {
        guard (1...publicValueLength).contains(clientPublic.count) else {
            throw KeychainError(.param, "the client's DH public value is \(clientPublic.count) bytes; it must be 1 to 128")
        }
        guard let context = BN_CTX_new() else { throw outOfMemory() }
        defer { BN_CTX_free(context) }
        guard let p = BN_get_rfc2409_prime_1024(nil), let g = BN_new(), let y = BN_new(),
              let pMinusOne = BN_new(), let publicValue = BN_new(), let shared = BN_new() else { throw outOfMemory() }
        defer {
            BN_free(p); BN_free(g); BN_free(y); BN_free(pMinusOne); BN_free(publicValue)
            BN_clear_free(shared)
        }
        guard BN_set_word(g, 2) == 1, BN_copy(pMinusOne, p) != nil, BN_sub_word(pMinusOne, 1) == 1,
              BN_bin2bn(clientPublic, Int32(clientPublic.count), y) != nil else { throw outOfMemory() }
        // 1 and p − 1 would force the shared value to 1 or ±1: refuse them, and anything outside the group.
        guard BN_cmp(y, BN_value_one()) > 0, BN_cmp(y, pMinusOne) < 0 else {
            throw KeychainError(.param, "the client's DH public value is not in the group")
        }
        guard let x = exponentBytes.withUnsafeBytes({ BN_bin2bn($0.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32($0.count), nil) }) else {
            throw outOfMemory()
        }
        defer { BN_clear_free(x) }
        BN_set_flags(x, BN_FLG_CONSTTIME)
        guard BN_mod_exp_mont_consttime(publicValue, g, x, p, context, nil) == 1,
              BN_mod_exp_mont_consttime(shared, y, x, p, context, nil) == 1 else {
            throw KeychainError(.internal, "libcrypto's modular exponentiation failed")
        }
        var serverPublic = [UInt8](repeating: 0, count: publicValueLength)
        guard BN_bn2binpad(publicValue, &serverPublic, Int32(publicValueLength)) == publicValueLength else {
            throw KeychainError(.internal, "the server's DH public value does not fit 128 bytes")
        }
        // Left-padded to 128 bytes before the KDF, as every other implementation does.
        let z = try SecretBytes(count: publicValueLength) { (buffer) throws(KeychainError) in
            guard BN_bn2binpad(shared, buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(buffer.count)) == publicValueLength else {
                throw KeychainError(.internal, "the DH shared value does not fit 128 bytes")
            }
        }
        return (serverPublic, z)
    }

    /// HKDF-SHA256 (RFC 5869) of `secret`, salt 32 zero bytes (= none), empty info, 16 bytes.
    static func hkdf(_ secret: SecretBytes) throws(KeychainError) -> SecretBytes {
        guard let context = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nil) else { throw outOfMemory() }
        defer { EVP_PKEY_CTX_free(context) }
        let salt = [UInt8](repeating: 0, count: 32)
        let ready = secret.withUnsafeBytes { input in
            EVP_PKEY_derive_init(context) == 1
                && EVP_PKEY_CTX_set_hkdf_md(context, EVP_sha256()) == 1
                && EVP_PKEY_CTX_set1_hkdf_salt(context, salt, Int32(salt.count)) == 1
                && EVP_PKEY_CTX_set1_hkdf_key(context, input.baseAddress!.assumingMemoryBound(to: UInt8.self), Int32(input.count)) == 1
        }
        guard ready else { throw KeychainError(.internal, "libcrypto's HKDF could not be set up") }
        return try SecretBytes(count: keyLength) { (buffer) throws(KeychainError) in
            var length = buffer.count
            guard EVP_PKEY_derive(context, buffer.baseAddress!.assumingMemoryBound(to: UInt8.self), &length) == 1,
                  length == keyLength else {
                throw KeychainError(.internal, "libcrypto's HKDF failed")
            }
        }
    }

    /// Encrypts one secret for the client: a fresh IV and the AES-128-CBC-PKCS7 ciphertext.
    static func encrypt(_ plaintext: SecretBytes, key: SecretBytes) throws(KeychainError) -> (iv: [UInt8], ciphertext: [UInt8]) {
        var iv = [UInt8](repeating: 0, count: ivLength)
        guard RAND_bytes(&iv, Int32(ivLength)) == 1 else { throw KeychainError(.internal, "libcrypto's random generator failed") }
        guard let context = EVP_CIPHER_CTX_new() else { throw outOfMemory() }
        defer { EVP_CIPHER_CTX_free(context) }
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + ivLength)
        var written: Int32 = 0, last: Int32 = 0
        let ok = ciphertext.withUnsafeMutableBufferPointer { out in
            key.withUnsafeBytes { k in
                plaintext.withUnsafeBytes { input in
                    guard EVP_EncryptInit_ex(context, EVP_aes_128_cbc(), nil, k.baseAddress!.assumingMemoryBound(to: UInt8.self), iv) == 1 else { return false }
                    if let bytes = input.baseAddress, input.count > 0 {
                        guard EVP_EncryptUpdate(context, out.baseAddress!, &written, bytes.assumingMemoryBound(to: UInt8.self), Int32(input.count)) == 1 else { return false }
                    }
                    return EVP_EncryptFinal_ex(context, out.baseAddress! + Int(written), &last) == 1
                }
            }
        }
        guard ok else { throw KeychainError(.internal, "libcrypto's AES-128-CBC failed") }
        return (iv, Array(ciphertext.prefix(Int(written + last))))
    }

    /// Decrypts a secret the client sent. A wrong IV length, an empty value, a length that is
    /// not a whole number of blocks or bad padding: errSecParam (the session's own connection
    /// is the only one that can send it, so the distinction tells nobody else anything).
    static func decrypt(_ ciphertext: [UInt8], iv: [UInt8], key: SecretBytes) throws(KeychainError) -> SecretBytes {
        guard iv.count == ivLength else {
            throw KeychainError(.param, "the secret's parameters (its IV) are \(iv.count) bytes; they must be 16")
        }
        guard !ciphertext.isEmpty, ciphertext.count % 16 == 0 else {
            throw KeychainError(.param, "the encrypted secret is \(ciphertext.count) bytes; it must be a non-zero multiple of 16")
        }
        guard let context = EVP_CIPHER_CTX_new() else { throw outOfMemory() }
        defer { EVP_CIPHER_CTX_free(context) }
        var length = 0
        let padded = try SecretBytes(count: ciphertext.count + ivLength) { (buffer) throws(KeychainError) in
            let out = buffer.baseAddress!.assumingMemoryBound(to: UInt8.self)
            var written: Int32 = 0, last: Int32 = 0
            let ok = key.withUnsafeBytes { k in
                EVP_DecryptInit_ex(context, EVP_aes_128_cbc(), nil, k.baseAddress!.assumingMemoryBound(to: UInt8.self), iv) == 1
                    && EVP_DecryptUpdate(context, out, &written, ciphertext, Int32(ciphertext.count)) == 1
                    && EVP_DecryptFinal_ex(context, out + Int(written), &last) == 1
            }
            guard ok else { throw KeychainError(.param, "the encrypted secret does not decrypt with this session's key (bad padding)") }
            length = Int(written + last)
        }
        return SecretBytes(padded.prefix(length))
    }

    private static func outOfMemory() -> KeychainError {
        KeychainError(.allocate, "libcrypto could not allocate memory")
    }
}
