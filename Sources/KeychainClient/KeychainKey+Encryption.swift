import KeychainProtocol

extension KeychainKey {
    /// The algorithm a key of this type encrypts with unless told otherwise: Apple's
    /// recommended ECIES form for P-256, a sealed box for X25519; nil for Ed25519, which only signs.
    public var defaultEncryptionAlgorithm: KeyEncryptionAlgorithm? {
        switch type {
        case .p256: .eciesEncryptionCofactorVariableIVX963SHA256AESGCM
        case .x25519: .sealedBoxX25519XSalsa20Poly1305
        case .ed25519: nil
        }
    }

    /// `plaintext` encrypted to this key's public half, as SecKeyCreateEncryptedData does with
    /// the public key: P-256 ECIES (ephemeral public key ‖ AES-GCM ciphertext ‖ tag) or an
    /// X25519 sealed box. The daemon checks that the key is still visible to the caller, but
    /// needs no class key: a when-unlocked key can be encrypted to while the keychain is locked.
    public func encrypt(_ plaintext: SecretBytes, algorithm: KeyEncryptionAlgorithm? = nil) throws(KeychainError) -> [UInt8] {
        let algorithm = try chosen(algorithm)
        return Array(try connection.perform(Calls.data(.keyEncrypt(query: reference, parameters: [
            "algorithm": .string(algorithm.rawValue), "data": .data(plaintext), "publicKey": .data(SecretBytes(publicKey))]), "ciphertext")))
    }

    /// The plaintext of a ciphertext made for this key, in wiped memory. Needs the key's decrypt
    /// flag and its class key. A wrong key or an altered ciphertext is errSecParam, as on Apple's
    /// platforms. A key sealed under an application password needs `context` holding it (as `sign`).
    public func decrypt(_ ciphertext: [UInt8], algorithm: KeyEncryptionAlgorithm? = nil,
                        context: AuthenticationContext? = nil) throws(KeychainError) -> SecretBytes {
        let algorithm = try chosen(algorithm)
        return try connection.perform(Calls.data(.keyDecrypt(query: try Self.applying(context, on: connection, to: reference), parameters: [
            "algorithm": .string(algorithm.rawValue), "data": .data(SecretBytes(ciphertext))]), "plaintext"))
    }

    private func chosen(_ algorithm: KeyEncryptionAlgorithm?) throws(KeychainError) -> KeyEncryptionAlgorithm {
        guard let algorithm = algorithm ?? defaultEncryptionAlgorithm else {
            throw KeychainError(.param, "an \(type.rawValue) key does not encrypt; it signs")
        }
        return algorithm
    }
}
