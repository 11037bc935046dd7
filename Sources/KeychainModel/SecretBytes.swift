#if canImport(Glibc)
import Glibc
#endif

/// One heap allocation that may hold a secret: zeroed over its whole capacity before it is
/// freed, and when it grows, the old allocation is zeroed before it is freed. Its writes are
/// fileprivate: only the non-copyable `ByteWriter` below makes them (one owner while it is
/// written), and a `SecretBytes` that shares it has no way to write it again.
final class SecretStorage: @unchecked Sendable {
    // @unchecked: every write is fileprivate to this file and made through a ByteWriter, which
    // cannot be copied and gives the storage away (consuming `finish()`) before anyone shares it.
    // The mutable pointer stays in this file too: outside it, the bytes are read through `bytes`.
    fileprivate private(set) var base: UnsafeMutableRawPointer
    private var capacity: Int
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

    fileprivate func reserve(_ needed: Int) {
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

    fileprivate func append(_ source: UnsafeRawBufferPointer) {
        guard let from = source.baseAddress, source.count > 0 else { return }
        reserve(count + source.count)
        memcpy(base + count, from, source.count)
        count += source.count
    }

    /// Marks `n` more bytes, written directly at `base + count`, as used.
    fileprivate func grow(by n: Int) {
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

    fileprivate init(storage: SecretStorage) { self.storage = storage }

    /// A copy of `bytes` in wiped memory (the source is the caller's to wipe).
    public init<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        var writer = ByteWriter(capacity: bytes.count)
        writer.raw(bytes)
        self = writer.finish()
    }

    /// `count` bytes written by `body` straight into wiped memory.
    public init<E: Error>(count: Int, initializingWith body: (UnsafeMutableRawBufferPointer) throws(E) -> Void) throws(E) {
        var writer = ByteWriter(capacity: count)
        try writer.append(upTo: count) { (buffer) throws(E) in
            try body(buffer)
            return count
        }
        self = writer.finish()
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

/// Little-endian byte writer for the keychain's binary encodings (sealed item plaintexts,
/// wire frames, backups). Its buffer is wiped memory, zeroed whenever it grows and when it is
/// freed, and the writer cannot be copied, so no copy of a half-written secret is left behind.
public struct ByteWriter: ~Copyable {
    private let storage: SecretStorage

    public init(capacity: Int = 0) { storage = SecretStorage(capacity: capacity) }

    public var count: Int { storage.count }

    /// An ordinary copy of what was written: for encodings that hold no secret in clear
    /// (ciphertexts, the keybag record). Secrets leave through `finish()`.
    public var bytes: [UInt8] { Array(storage.bytes) }

    /// What was written, handed over without a copy.
    public consuming func finish() -> SecretBytes { SecretBytes(storage: storage) }

    public mutating func u8(_ v: UInt8) { withUnsafeBytes(of: v) { storage.append($0) } }
    public mutating func u16(_ v: UInt16) { withUnsafeBytes(of: v.littleEndian) { storage.append($0) } }
    public mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { storage.append($0) } }
    public mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { storage.append($0) } }

    public mutating func raw<C: Collection>(_ b: C) where C.Element == UInt8 {
        let done: Void? = b.withContiguousStorageIfAvailable { storage.append(UnsafeRawBufferPointer($0)) }
        if done == nil {
            storage.reserve(storage.count + b.count)
            for byte in b { u8(byte) }
        }
    }

    /// u32 length, then the bytes.
    public mutating func lengthPrefixed<C: Collection>(_ b: C) where C.Element == UInt8 {
        u32(UInt32(b.count))
        raw(b)
    }

    /// Lets `fill` write up to `n` bytes straight after what was written (a socket read into
    /// wiped memory); `fill` returns how many it wrote. Capacity grows with what is written,
    /// not with what was announced.
    public mutating func append<E: Error>(upTo n: Int, _ fill: (UnsafeMutableRawBufferPointer) throws(E) -> Int) throws(E) {
        storage.reserve(storage.count + n)
        let written = try fill(UnsafeMutableRawBufferPointer(start: storage.base + storage.count, count: n))
        precondition(written >= 0 && written <= n)
        storage.grow(by: written)
    }

    /// Overwrites 4 bytes at `offset` (a length written before what it counts was known).
    public mutating func patchU32(_ v: UInt32, at offset: Int) {
        precondition(offset >= 0 && offset + 4 <= storage.count)
        withUnsafeBytes(of: v.littleEndian) { (storage.base + offset).copyMemory(from: $0.baseAddress!, byteCount: 4) }
    }
}

/// Byte containers read in place, without a copy: ordinary arrays (ciphertexts, salts) and
/// SecretBytes (plaintexts, passcodes).
public protocol ContiguousByteBuffer {
    var count: Int { get }
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R
}

extension Array: ContiguousByteBuffer where Element == UInt8 {}
extension SecretBytes: ContiguousByteBuffer {}
