/// Reads what ByteWriter wrote; every read is bounds-checked and a short input throws the
/// status the caller chose (errSecParam for requests, errSecDecode for stored items). Data
/// fields come out as SecretBytes, copied straight from the input's wiped memory.
public struct ByteReader {
    private let bytes: SecretBytes
    public private(set) var offset: Int
    private let failure: KeychainStatus

    public init(_ bytes: SecretBytes, offset: Int = 0, failure: KeychainStatus) {
        self.bytes = bytes
        self.offset = offset
        self.failure = failure
    }

    /// For inputs that hold no secret in clear (ciphertexts, the keybag record).
    public init(_ bytes: [UInt8], offset: Int = 0, failure: KeychainStatus) {
        self.init(SecretBytes(bytes), offset: offset, failure: failure)
    }

    public var remaining: Int { bytes.count - offset }
    public var isAtEnd: Bool { offset == bytes.count }

    public func fail(_ message: String) -> KeychainError { KeychainError(failure, message) }

    /// The next `n` bytes, in place; valid while the reader's input lives.
    private mutating func span(_ n: Int) throws(KeychainError) -> UnsafeRawBufferPointer {
        guard n >= 0, n <= remaining else { throw fail("truncated input: wanted \(n) bytes, \(remaining) left") }
        defer { offset += n }
        return UnsafeRawBufferPointer(rebasing: bytes.storage.bytes[offset..<(offset + n)])
    }

    /// The next `n` bytes as an ordinary array: for fields that are not secret.
    public mutating func take(_ n: Int) throws(KeychainError) -> [UInt8] { Array(try span(n)) }

    public mutating func u8() throws(KeychainError) -> UInt8 { try span(1)[0] }
    public mutating func u16() throws(KeychainError) -> UInt16 { UInt16(try fixed(2)) }
    public mutating func u32() throws(KeychainError) -> UInt32 { UInt32(try fixed(4)) }
    public mutating func u64() throws(KeychainError) -> UInt64 { try fixed(8) }

    private mutating func fixed(_ n: Int) throws(KeychainError) -> UInt64 {
        let s = try span(n)
        var v: UInt64 = 0
        for i in 0..<n { v |= UInt64(s[i]) << (8 * UInt64(i)) }
        return v
    }

    /// `n` bytes as text, or nil if they are not valid UTF-8. ASCII (nearly every key and most
    /// values) takes a fast path; the general validator is only run on other bytes.
    public mutating func utf8(_ n: Int) throws(KeychainError) -> String? {
        let slice = try span(n).bindMemory(to: UInt8.self)
        var ascii = true
        for b in slice where b >= 0x80 {
            ascii = false
            break
        }
        return ascii ? String(decoding: slice, as: UTF8.self) : StrictUTF8.string(slice)
    }

    /// u32 length then bytes, with the length checked against what is left before copying.
    public mutating func lengthPrefixed(max: Int) throws(KeychainError) -> SecretBytes {
        let n = Int(try u32())
        guard n <= max else { throw fail("field of \(n) bytes exceeds the limit of \(max)") }
        return SecretBytes(try span(n))
    }

    /// `lengthPrefixed` as an ordinary array: for fields that are not secret (salts, wrapped keys).
    public mutating func lengthPrefixedArray(max: Int) throws(KeychainError) -> [UInt8] {
        let n = Int(try u32())
        guard n <= max else { throw fail("field of \(n) bytes exceeds the limit of \(max)") }
        return Array(try span(n))
    }
}

/// The binary encoding of an attribute dictionary:
///
///     u32 count, then per entry: u16 key length, key (UTF-8), u8 type tag, value
///     tags: 1 string (u32 length + UTF-8), 2 data (u32 length + bytes),
///           3 int (i64), 4 bool (u8 0/1), 5 date (f64 bits, CFAbsoluteTime)
///
/// All integers little-endian. Keys are written in sorted order so the encoding of a
/// dictionary is canonical.
public enum AttributeCodec {
    public enum Tag: UInt8 { case string = 1, data = 2, int = 3, bool = 4, date = 5 }

    public static func encode(_ dict: AttributeDictionary, into w: inout ByteWriter) {
        w.u32(UInt32(dict.count))
        for (key, value) in dict.sorted(by: { $0.key < $1.key }) {
            w.u16(UInt16(key.utf8.count))
            w.raw(key.utf8)
            encodeValue(value, into: &w)
        }
    }

    public static func encodeValue(_ value: AttributeValue, into w: inout ByteWriter) {
        switch value {
        case .string(let s): w.u8(Tag.string.rawValue); w.lengthPrefixed(s.utf8)
        case .data(let d): w.u8(Tag.data.rawValue); w.lengthPrefixed(d)
        case .int(let i): w.u8(Tag.int.rawValue); w.u64(UInt64(bitPattern: i))
        case .bool(let b): w.u8(Tag.bool.rawValue); w.u8(b ? 1 : 0)
        case .date(let t): w.u8(Tag.date.rawValue); w.u64(t.bitPattern)
        }
    }

    public static func encode(_ dict: AttributeDictionary) -> SecretBytes {
        var w = ByteWriter()
        encode(dict, into: &w)
        return w.finish()
    }

    /// Decodes a dictionary; rejects duplicate keys, unknown tags, invalid UTF-8 and values
    /// larger than `maxValueBytes`.
    public static func decode(
        from r: inout ByteReader, maxEntries: Int = KeychainLimits.maxQueryKeys,
        maxValueBytes: Int = KeychainLimits.maxSecretBytes
    ) throws(KeychainError) -> AttributeDictionary {
        let count = Int(try r.u32())
        guard count <= maxEntries else { throw r.fail("\(count) entries exceed the limit of \(maxEntries)") }
        var dict: AttributeDictionary = [:]
        dict.reserveCapacity(count)
        for _ in 0..<count {
            let klen = Int(try r.u16())
            guard klen > 0, klen <= 64 else { throw r.fail("key length \(klen) is out of range") }
            guard let key = try r.utf8(klen) else { throw r.fail("a key is not valid UTF-8") }
            let value = try decodeValue(from: &r, key: key, maxValueBytes: maxValueBytes)
            guard dict.updateValue(value, forKey: key) == nil else { throw r.fail("key \(key) appears twice") }
        }
        return dict
    }

    public static func decodeValue(
        from r: inout ByteReader, key: String, maxValueBytes: Int
    ) throws(KeychainError) -> AttributeValue {
        let tag = try r.u8()
        switch Tag(rawValue: tag) {
        case .string:
            let n = Int(try r.u32())
            guard n <= maxValueBytes else { throw r.fail("field of \(n) bytes exceeds the limit of \(maxValueBytes)") }
            guard let s = try r.utf8(n) else { throw r.fail("\(key) is not valid UTF-8") }
            return .string(s)
        case .data: return .data(try r.lengthPrefixed(max: maxValueBytes))
        case .int: return .int(Int64(bitPattern: try r.u64()))
        case .bool:
            let b = try r.u8()
            guard b <= 1 else { throw r.fail("\(key) is not a valid boolean") }
            return .bool(b == 1)
        case .date: return .date(Double(bitPattern: try r.u64()))
        case nil: throw r.fail("\(key) has unknown value type \(tag)")
        }
    }

    public static func decode(_ bytes: SecretBytes, failure: KeychainStatus) throws(KeychainError) -> AttributeDictionary {
        var r = ByteReader(bytes, failure: failure)
        let dict = try decode(from: &r)
        guard r.isAtEnd else { throw r.fail("\(r.remaining) unexpected bytes after the attributes") }
        return dict
    }
}

/// Documented limits (docs/security.md): requests above them are rejected, never truncated.
public enum KeychainLimits {
    /// Largest secret (kSecValueData): 1 MiB.
    public static let maxSecretBytes = 1 << 20
    /// Largest value of any other attribute: 64 KiB.
    public static let maxAttributeBytes = 64 << 10
    /// Most keys in one query or attribute dictionary (Apple's limit is 128 too).
    public static let maxQueryKeys = 128
}

/// Bytes as text when they are valid UTF-8, else nil: what `String(validating:as:)` answers,
/// without its generic entry point, for which the runtime builds metadata from mangled names
/// on first use in every process (2% of a `keychain get`'s instructions, for one empty message).
/// Decoding repairs invalid bytes to U+FFFD, so the text's bytes equal the input exactly when
/// the input was valid.
public enum StrictUTF8 {
    public static func string(_ bytes: UnsafeBufferPointer<UInt8>) -> String? {
        let text = String(decoding: bytes, as: UTF8.self)
        return text.utf8.count == bytes.count && text.utf8.elementsEqual(bytes) ? text : nil
    }

    public static func string(_ bytes: [UInt8]) -> String? {
        bytes.withUnsafeBufferPointer { string($0) }
    }
}
