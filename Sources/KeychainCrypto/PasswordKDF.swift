internal import CSodium
import KeychainModel

/// Argon2id cost, stored with the keybag so that it can be raised later without losing
/// the ability to open a keybag made under the old cost.
public struct Argon2Parameters: Sendable, Equatable {
    public var opsLimit: UInt64
    public var memLimitBytes: Int

    public init(opsLimit: UInt64, memLimitBytes: Int) {
        self.opsLimit = opsLimit
        self.memLimitBytes = memLimitBytes
    }

    /// The default: 2 passes over 256 MiB, about half a second on the 2-core machines here
    /// (docs/performance.md has the measurement).
    public static let standard = Argon2Parameters(opsLimit: 2, memLimitBytes: 256 << 20)

    /// The least libsodium allows: for tests only (KEYCHAIND_INSECURE_FAST_KDF=1).
    public static let testingOnly = Argon2Parameters(
        opsLimit: UInt64(crypto_pwhash_argon2id_OPSLIMIT_MIN), memLimitBytes: 8 << 10)

    public var isValid: Bool {
        opsLimit >= UInt64(crypto_pwhash_argon2id_OPSLIMIT_MIN)
            && opsLimit <= 64
            && memLimitBytes >= Int(crypto_pwhash_argon2id_MEMLIMIT_MIN)
            && memLimitBytes <= 4 << 30
    }

    public static let saltBytes = Int(crypto_pwhash_argon2id_SALTBYTES)
}

public enum PasswordKDF {
    /// Argon2id of `passcode` and `salt` into a guarded 32-byte key.
    public static func derive(passcode: some ContiguousByteBuffer, salt: [UInt8], parameters: Argon2Parameters) throws(KeychainError) -> SecureKey {
        Sodium.ensureInitialised()
        guard parameters.isValid else { throw KeychainError(.param, "Argon2id parameters out of range") }
        guard passcode.count > 0 else { throw KeychainError(.param, "the passcode is empty") }
        guard salt.count == Argon2Parameters.saltBytes else { throw KeychainError(.decode, "keybag salt has the wrong length") }
        var out = [UInt8](repeating: 0, count: SecureKey.byteCount)
        let rc = out.withUnsafeMutableBufferPointer { o in
            passcode.withUnsafeBytes { p in
                salt.withUnsafeBufferPointer { s in
                    crypto_pwhash(o.baseAddress!, UInt64(o.count), p.baseAddress!.assumingMemoryBound(to: CChar.self), UInt64(p.count),
                                  s.baseAddress!, parameters.opsLimit, parameters.memLimitBytes,
                                  crypto_pwhash_ALG_ARGON2ID13)
                }
            }
        }
        guard rc == 0 else {
            Sodium.wipe(&out)
            throw KeychainError(.allocate, "Argon2id could not allocate \(parameters.memLimitBytes >> 20) MiB")
        }
        return SecureKey.taking(&out)
    }
}
