#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain key encrypt|decrypt`: encryption with keys that stay inside keychaind
/// (docs/keys.md, Encryption). Data on standard input, result on standard output.
enum KeyEncryptionCommands {
    static let options: [(name: String, help: String)] = globalOptions + KeyCommands.labelOption + [
        ("algorithm", "p256: ecies (default; Apple's ECIES, cofactor, variable IV) or ecies-zero-iv (Apple's legacy form); x25519: sealed-box (default)."),
    ]

    static let commands: [Command] = [
        Command(spec: CommandSpec(name: "key encrypt", summary: "Encrypt standard input to a key's public half; the ciphertext goes to standard output.",
                                  options: options, flags: [])) { c in
            let key = try KeyCommands.key(c)
            let algorithm = try algorithm(c)
            var input = try SecretInput.readAllStdin(limit: KeychainLimits.maxSecretBytes)
            let plaintext = SecretBytes(input)
            explicit_bzero(&input, input.count)
            Output.stdout(try key.encrypt(plaintext, algorithm: algorithm))
        },
        Command(spec: CommandSpec(name: "key decrypt", summary: "Decrypt standard input with a key inside keychaind; the plaintext goes to standard output.",
                                  options: options, flags: ApplicationPasswordInput.flags)) { c in
            let key = try KeyCommands.key(c)
            let algorithm = try algorithm(c)
            let plaintext = try ApplicationPasswordInput.usingKey(key, c.arguments, input: {
                try SecretInput.readAllStdin(limit: KeychainLimits.maxSecretBytes + 128)
            }) { (ciphertext, context) throws(KeychainError) in try key.decrypt(ciphertext, algorithm: algorithm, context: context) }
            Output.stdout(plaintext)
        },
    ]

    /// The CLI's short names for the encryption algorithms.
    static let algorithms: [(name: String, algorithm: KeyEncryptionAlgorithm)] = [
        ("ecies", .eciesEncryptionCofactorVariableIVX963SHA256AESGCM),
        ("ecies-zero-iv", .eciesEncryptionStandardX963SHA256AESGCM),
        ("sealed-box", .sealedBoxX25519XSalsa20Poly1305),
    ]

    /// nil: the key type's default.
    private static func algorithm(_ c: Context) throws -> KeyEncryptionAlgorithm? {
        guard let name = try c.arguments.choice("algorithm", algorithms.map(\.name)) else { return nil }
        return algorithms.first { $0.name == name }!.algorithm
    }
}
