internal import CSodium
import KeychainModel

/// Bytes of any length in libsodium guarded memory (locked against swap, guard pages, read-only
/// once filled, zeroed when freed): an application password held by an authentication context
/// for as long as the context lives.
// @unchecked: as SecureKey, the bytes are read-only from init on.
public final class GuardedBytes: @unchecked Sendable, ContiguousByteBuffer {
    private let pointer: UnsafeMutableRawPointer
    public let count: Int

    /// A copy of `bytes` (the source is the caller's to wipe).
    public init(copying bytes: some ContiguousByteBuffer) {
        Sodium.ensureInitialised()
        count = bytes.count
        guard let p = sodium_malloc(Swift.max(count, 1)) else {
            fatalError("sodium_malloc failed: raise RLIMIT_MEMLOCK or free memory")
        }
        pointer = p
        bytes.withUnsafeBytes { source in
            if let from = source.baseAddress, source.count > 0 { p.copyMemory(from: from, byteCount: source.count) }
        }
        sodium_mprotect_readonly(p)
    }

    deinit {
        sodium_mprotect_readwrite(pointer)
        sodium_free(pointer)  // zeroes before freeing
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}

/// The application password's layer of an item (accc flag applicationPassword, issue 29): the
/// secret sealed under a key Argon2id derives from the password the app gave its context, with
/// a salt of its own. What the item's row holds in place of the secret, so that the class key
/// and the device key open the row but not the secret.
///
///     sealed = 0x01 || ops u32 || memory KiB u32 || salt (16) || seal(secret, Argon2id(password, salt), aad)
///     aad    = "keychaind/v1/app-password" || the 25 bytes before the AEAD
///
/// The cost travels with the item, so that raising the keychain's cost later leaves older items
/// readable. The whole of it sits inside the item's own two AEAD layers (ItemSealer), which
/// authenticate the salt and the cost with the row.
public enum ApplicationPasswordSeal {
    static let version: UInt8 = 1
    static let headerBytes = 1 + 4 + 4 + Argon2Parameters.saltBytes
    /// What sealing adds to a secret.
    public static let overhead = headerBytes + AEAD.nonceBytes + AEAD.tagBytes
    /// The longest password a context holds.
    public static let maxPasswordBytes = 1024

    /// Seals `secret` under a key derived from `password` with a fresh salt (Argon2id: run it
    /// without any lock held).
    public static func seal(_ secret: some ContiguousByteBuffer, password: some ContiguousByteBuffer,
                            parameters: Argon2Parameters) throws(KeychainError) -> [UInt8] {
        let salt = Sodium.randomBytes(Argon2Parameters.saltBytes)
        var header: [UInt8] = [version]
        header += bigEndian(UInt32(clamping: parameters.opsLimit))
        header += bigEndian(UInt32(clamping: parameters.memLimitBytes >> 10))
        header += salt
        let key = try PasswordKDF.derive(passcode: password, salt: salt, parameters: parameters)
        return header + AEAD.seal(secret, associatedData: associatedData(header), key: key)
    }

    /// The secret, or errSecAuthFailed when `password` is not the item's (Argon2id runs first:
    /// run it without any lock held); errSecDecode when `sealed` is no such layer.
    public static func open(_ sealed: some ContiguousByteBuffer, password: some ContiguousByteBuffer) throws(KeychainError) -> SecretBytes {
        let bytes = sealed.withUnsafeBytes { Array($0) }  // ciphertext: not secret
        guard bytes.count >= overhead, bytes[0] == version else {
            throw KeychainError(.decode, "the item's application-password layer is malformed")
        }
        let ops = UInt64(u32(bytes, at: 1))
        let memory = Int(u32(bytes, at: 5)) << 10
        let parameters = Argon2Parameters(opsLimit: ops, memLimitBytes: memory)
        guard parameters.isValid else { throw KeychainError(.decode, "the item's application-password cost is out of range") }
        let header = Array(bytes[0..<headerBytes])
        let key = try PasswordKDF.derive(passcode: password, salt: Array(header[9...]), parameters: parameters)
        guard let secret = AEAD.open(Array(bytes[headerBytes...]), associatedData: associatedData(header), key: key) else {
            throw KeychainError(.authFailed, "the application password is not correct")
        }
        return secret
    }

    /// What names this sealing of a secret wherever a copy of it goes (a backup restored as a
    /// new item keeps it; a new secret gets a new one): its salt. nil for a malformed layer.
    public static func sealingID(of sealed: some ContiguousByteBuffer) -> [UInt8]? {
        sealed.withUnsafeBytes { b in b.count >= overhead && b[0] == version ? Array(b[9..<headerBytes]) : nil }
    }

    static func associatedData(_ header: [UInt8]) -> [UInt8] { Array("keychaind/v1/app-password".utf8) + header }

    private static func bigEndian(_ v: UInt32) -> [UInt8] {
        [UInt8(v >> 24), UInt8(truncatingIfNeeded: v >> 16), UInt8(truncatingIfNeeded: v >> 8), UInt8(truncatingIfNeeded: v)]
    }

    private static func u32(_ b: [UInt8], at i: Int) -> UInt32 {
        UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }
}
