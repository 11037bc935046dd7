internal import CSodium
import KeychainModel

/// A 32-byte key in libsodium guarded memory: locked against swap, guard pages around it,
/// read-only once filled, and zeroed by sodium_free when the last reference goes. Keys are
/// immutable after init, so sharing one across threads is safe.
// @unchecked: a raw pointer is never Sendable, though these bytes are read-only from init on.
public final class SecureKey: @unchecked Sendable, ContiguousByteBuffer {
    public static let byteCount = 32
    private let pointer: UnsafeMutableRawPointer

    /// Fills the key from `fill`, which must write exactly `byteCount` bytes. Internal so that
    /// Sodium.swift's key agreement and signing can fill keys straight from libsodium.
    init(fill: (UnsafeMutableRawBufferPointer) -> Void) {
        Sodium.ensureInitialised()
        guard let p = sodium_malloc(Self.byteCount) else {
            fatalError("sodium_malloc failed: raise RLIMIT_MEMLOCK or free memory")
        }
        pointer = p
        fill(UnsafeMutableRawBufferPointer(start: p, count: Self.byteCount))
        sodium_mprotect_readonly(p)
    }

    deinit {
        sodium_mprotect_readwrite(pointer)
        sodium_free(pointer)  // zeroes before freeing
    }

    /// A fresh random key.
    public static func random() -> SecureKey {
        SecureKey { randombytes_buf($0.baseAddress!, $0.count) }
    }

    /// Takes `bytes` into guarded memory and wipes the caller's copy.
    public static func taking(_ bytes: inout [UInt8]) -> SecureKey {
        precondition(bytes.count == byteCount, "a key is \(byteCount) bytes")
        let key = SecureKey { dst in bytes.withUnsafeBytes { dst.copyMemory(from: $0) } }
        Sodium.wipe(&bytes)
        return key
    }

    /// A copy of `bytes` in guarded memory (the source wipes itself when released).
    public convenience init(copying bytes: SecretBytes) {
        precondition(bytes.count == Self.byteCount, "a key is \(Self.byteCount) bytes")
        self.init { dst in bytes.withUnsafeBytes { dst.copyMemory(from: $0) } }
    }

    /// Derives subkey `id` for `context` (8 bytes, e.g. "keybag__") with crypto_kdf.
    public func derive(id: UInt64, context: StaticString) -> SecureKey {
        precondition(context.utf8CodeUnitCount == Int(crypto_kdf_CONTEXTBYTES))
        return withUnsafeBytes { master in
            SecureKey { dst in
                context.withUTF8Buffer { ctx in
                    ctx.withMemoryRebound(to: CChar.self) { c in
                        _ = crypto_kdf_derive_from_key(
                            dst.baseAddress!.assumingMemoryBound(to: UInt8.self), dst.count, id,
                            c.baseAddress!, master.baseAddress!.assumingMemoryBound(to: UInt8.self))
                    }
                }
            }
        }
    }

    /// Keyed BLAKE2b of `message` under this key, as a new key (used to tangle the passcode
    /// key with the device key).
    public func hashToKey(_ message: some ContiguousByteBuffer) -> SecureKey {
        withUnsafeBytes { k in
            SecureKey { dst in
                message.withUnsafeBytes { m in
                    _ = crypto_generichash(dst.baseAddress!.assumingMemoryBound(to: UInt8.self), dst.count,
                                           m.baseAddress?.assumingMemoryBound(to: UInt8.self), UInt64(m.count),
                                           k.baseAddress!.assumingMemoryBound(to: UInt8.self), k.count)
                }
            }
        }
    }

    /// The only way to see the key bytes; the buffer must not escape the closure.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: Self.byteCount))
    }

    public var count: Int { Self.byteCount }

    /// Whether `other` holds the same bytes, compared in constant time without copying either
    /// key out of guarded memory.
    public func isEqual(toKey other: SecureKey) -> Bool {
        withUnsafeBytes { a in other.withUnsafeBytes { b in sodium_memcmp(a.baseAddress!, b.baseAddress!, Self.byteCount) == 0 } }
    }
}
