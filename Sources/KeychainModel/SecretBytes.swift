#if canImport(Glibc)
import Glibc
#endif

/// One heap allocation that may hold a secret: zeroed over its whole capacity before it is
/// freed, and when it grows, the old allocation is zeroed before it is freed. Reached only
/// through a non-copyable `ByteWriter` (one owner while it is written) or a `SecretBytes`
/// (never written again), so it is never mutated while shared.
final class SecretStorage: @unchecked Sendable {
    // @unchecked: written only by its one non-copyable ByteWriter, never once a SecretBytes shares it; no type says so.
    private(set) var base: UnsafeMutableRawPointer
    private(set) var capacity: Int
    private(set) var count = 0

    init(capacity: Int) {
        self.capacity = Swift.max(capacity, 16)
        guard let p = malloc(self.capacity) else { fatalError("out of memory") }
        base = p
    }

    deinit {
        explicit_bzero(base, capacity)
        free(base)
    }

    func reserve(_ needed: Int) {
        guard needed > capacity else { return }
        var next = capacity
        while next < needed { next *= 2 }
        guard let p = malloc(next) else { fatalError("out of memory") }
        memcpy(p, base, count)
        explicit_bzero(base, capacity)
        free(base)
        base = p
        capacity = next
    }

    func append(_ source: UnsafeRawBufferPointer) {
        guard let from = source.baseAddress, source.count > 0 else { return }
        reserve(count + source.count)
        memcpy(base + count, from, source.count)
        count += source.count
    }

    /// Marks `n` more bytes, written directly at `base + count`, as used.
    func grow(by n: Int) {
        precondition(count + n <= capacity)
        count += n
    }

    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
}

/// Bytes that may be a secret (item data, passcodes, passwords, and the frames and buffers
/// that carry them). Copies of the value share one allocation, so the bytes are never
/// duplicated implicitly; the allocation is zeroed over its whole capacity when the last copy
/// goes. Equality takes the same time wherever the first difference is; descriptions never
/// show the bytes. An `Array` made from it is an ordinary, unwiped copy: only for bytes that
/// are not secret.
public struct SecretBytes: Sendable, Hashable, RandomAccessCollection, ExpressibleByArrayLiteral, CustomStringConvertible {
    let storage: SecretStorage

    init(storage: SecretStorage) { self.storage = storage }

    /// A copy of `bytes` in wiped memory (the source is the caller's to wipe).
    public init<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        storage = SecretStorage(capacity: bytes.count)
        let done: Void? = bytes.withContiguousStorageIfAvailable { storage.append(UnsafeRawBufferPointer($0)) }
        if done == nil {
            for b in bytes { Swift.withUnsafeBytes(of: b) { storage.append($0) } }
        }
    }

    /// `count` bytes written by `body` straight into wiped memory.
    public init<E: Error>(count: Int, initializingWith body: (UnsafeMutableRawBufferPointer) throws(E) -> Void) throws(E) {
        storage = SecretStorage(capacity: count)
        try body(UnsafeMutableRawBufferPointer(start: storage.base, count: count))
        storage.grow(by: count)
    }

    public init(arrayLiteral elements: UInt8...) { self.init(elements) }

    public static var empty: SecretBytes { SecretBytes([UInt8]()) }

    public var startIndex: Int { 0 }
    public var endIndex: Int { storage.count }
    public subscript(position: Int) -> UInt8 {
        precondition(position >= 0 && position < storage.count, "index out of range")
        return storage.base.load(fromByteOffset: position, as: UInt8.self)
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(storage.bytes)
    }

    public func withContiguousStorageIfAvailable<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R? {
        try body(storage.bytes.bindMemory(to: UInt8.self))
    }

    public static func == (a: SecretBytes, b: SecretBytes) -> Bool {
        guard a.count == b.count else { return false }
        if a.storage === b.storage { return true }
        var difference: UInt8 = 0
        let x = a.storage.bytes, y = b.storage.bytes
        for i in 0..<x.count { difference |= x[i] ^ y[i] }
        return difference == 0
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
        hasher.combine(bytes: storage.bytes)
    }

    public var description: String { "SecretBytes(\(count) bytes)" }
}

/// Byte containers read in place, without a copy: ordinary arrays (ciphertexts, salts) and
/// SecretBytes (plaintexts, passcodes).
public protocol ContiguousByteBuffer {
    var count: Int { get }
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: ContiguousByteBuffer where Element == UInt8 {}
extension SecretBytes: ContiguousByteBuffer {}
