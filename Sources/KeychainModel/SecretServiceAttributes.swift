/// The attributes of a Secret Service item (D-Bus `a{ss}`), in the one canonical form that
/// keychaind stores as `xsat` and hashes into its attribute index (docs/semantics.md):
///
///     u32 count, then per pair: u32 length + name (UTF-8), u32 length + value (UTF-8)
///
/// little-endian, pairs sorted by the bytes of their names, each name once. Equal sets have
/// equal encodings, so "the same attributes" (CreateItem's replace) is byte equality.
public struct SecretServiceAttributes: Sendable, Hashable {
    /// Most pairs in one set.
    public static let maxPairs = 128
    /// Longest name, in bytes.
    public static let maxNameBytes = 1 << 10
    /// Longest encoding: the wire's limit for a value that is not a secret.
    public static let maxEncodedBytes = KeychainLimits.maxAttributeBytes

    private struct Pair: Sendable, Hashable {
        let name: String
        let value: String
    }

    /// Sorted by name bytes, names unique.
    private let sorted: [Pair]
    /// The canonical encoding. Equality and hashing are on it: byte for byte, as the index
    /// compares (Swift's String equality would take canonically equivalent text as equal).
    public let encoded: [UInt8]

    public static func == (a: SecretServiceAttributes, b: SecretServiceAttributes) -> Bool { a.encoded == b.encoded }
    public func hash(into hasher: inout Hasher) { hasher.combine(encoded) }

    /// The set a dictionary holds; errSecParam over a limit.
    public init(_ dictionary: [String: String]) throws(KeychainError) {
        let pairs = dictionary.map { Pair(name: $0.key, value: $0.value) }
            .sorted { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
        try self.init(checked: pairs)
    }

    /// Decodes the canonical encoding; errSecParam for anything else (unsorted or repeated
    /// names, bytes after the last pair, a limit passed).
    public init(encoded: [UInt8]) throws(KeychainError) {
        var r = ByteReader(encoded, failure: .param)
        try self.init(from: &r)
        guard r.isAtEnd else { throw KeychainError(.param, "\(r.remaining) unexpected bytes after the Secret Service attributes") }
    }

    /// Reads one canonical encoding from `r` (the wire's attribute search carries one after
    /// other fields). Fails with the reader's status.
    public init(from r: inout ByteReader) throws(KeychainError) {
        let start = r.offset
        let count = Int(try r.u32())
        guard count <= Self.maxPairs else { throw r.fail("\(count) Secret Service attributes exceed the limit of \(Self.maxPairs)") }
        var pairs: [Pair] = []
        pairs.reserveCapacity(count)
        var names: Set<String> = []
        for _ in 0..<count {
            let nameLength = Int(try r.u32())
            guard nameLength <= Self.maxNameBytes else {
                throw r.fail("a Secret Service attribute name of \(nameLength) bytes exceeds the limit of \(Self.maxNameBytes)")
            }
            guard let name = try r.utf8(nameLength) else { throw r.fail("a Secret Service attribute name is not UTF-8") }
            let valueLength = Int(try r.u32())
            guard valueLength <= Self.maxEncodedBytes else {
                throw r.fail("a Secret Service attribute value of \(valueLength) bytes exceeds the limit of \(Self.maxEncodedBytes)")
            }
            guard let value = try r.utf8(valueLength) else { throw r.fail("a Secret Service attribute value is not UTF-8") }
            if let last = pairs.last, !last.name.utf8.lexicographicallyPrecedes(name.utf8) {
                throw r.fail("Secret Service attribute names are not in canonical order, or one is repeated")
            }
            // Two names with different bytes that Swift holds equal (canonically equivalent
            // Unicode) would collapse in `dictionary`: refused, so that every view agrees.
            guard names.insert(name).inserted else { throw r.fail("a Secret Service attribute name is repeated") }
            pairs.append(Pair(name: name, value: value))
        }
        guard r.offset - start <= Self.maxEncodedBytes else {
            throw r.fail("the Secret Service attributes take \(r.offset - start) bytes; the limit is \(Self.maxEncodedBytes)")
        }
        sorted = pairs
        encoded = Self.encode(pairs)
    }

    private init(checked pairs: [Pair]) throws(KeychainError) {
        guard pairs.count <= Self.maxPairs else {
            throw .param("\(pairs.count) Secret Service attributes exceed the limit of \(Self.maxPairs)")
        }
        var size = 4
        for pair in pairs {
            guard pair.name.utf8.count <= Self.maxNameBytes else {
                throw .param("a Secret Service attribute name of \(pair.name.utf8.count) bytes exceeds the limit of \(Self.maxNameBytes)")
            }
            size += 8 + pair.name.utf8.count + pair.value.utf8.count
        }
        guard size <= Self.maxEncodedBytes else {
            throw .param("the Secret Service attributes take \(size) bytes; the limit is \(Self.maxEncodedBytes)")
        }
        sorted = pairs
        encoded = Self.encode(pairs)
    }

    private static func encode(_ pairs: [Pair]) -> [UInt8] {
        var w = ByteWriter(capacity: 4 + pairs.reduce(0) { $0 + 8 + $1.name.utf8.count + $1.value.utf8.count })
        w.u32(UInt32(pairs.count))
        for pair in pairs {
            w.lengthPrefixed(pair.name.utf8)
            w.lengthPrefixed(pair.value.utf8)
        }
        return w.bytes
    }

    public var dictionary: [String: String] {
        Dictionary(uniqueKeysWithValues: sorted.map { ($0.name, $0.value) })
    }

    /// The pairs in canonical order.
    public var pairs: [(name: String, value: String)] { sorted.map { ($0.name, $0.value) } }

    public var count: Int { sorted.count }
    public var isEmpty: Bool { sorted.isEmpty }

    /// Whether every pair of `other` is one of these, comparing bytes.
    public func contains(_ other: SecretServiceAttributes) -> Bool {
        var mine: [[UInt8]: [UInt8]] = [:]
        for pair in sorted { mine[Array(pair.name.utf8)] = Array(pair.value.utf8) }
        return other.sorted.allSatisfy { mine[Array($0.name.utf8)] == Array($0.value.utf8) }
    }
}

/// The names the Secret Service calls take, checked alike by the wire decoder and the store.
public enum SecretServiceNames {
    /// A Secret Service collection name: 1 to 64 bytes of [a-z0-9_].
    public static func isValidCollection(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count)
            && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x5F }
    }

    /// A sandboxed application's id as the portal gives it: 1 to 255 bytes of [A-Za-z0-9._-].
    public static func isValidAppID(_ id: String) -> Bool {
        (1...255).contains(id.utf8.count) && id.utf8.allSatisfy {
            ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A) || ($0 >= 0x30 && $0 <= 0x39)
                || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D
        }
    }
}
