/// The 32 decimal digits people compare to recognise a device or a circle (docs/sync.md,
/// 2.1): 16 bytes of a hash read as a big-endian 128-bit number, reduced mod 10^32. All 32 are
/// required wherever one is typed: matching a prefix would cut the work of forging a key pair
/// with the same fingerprint from ~2^106 hashes to what a prefix's length allows.
public struct SyncFingerprint: Sendable, Hashable, CustomStringConvertible {
    public static let digitCount = 32
    /// Exactly 32 ASCII digits.
    public let digits: String

    public init(hashBytes: [UInt8]) {
        precondition(hashBytes.count == 16, "a fingerprint is made from 16 bytes")
        var value: UInt128 = 0
        for byte in hashBytes { value = value << 8 | UInt128(byte) }
        var rest = value % Self.modulus
        var out = [UInt8](repeating: UInt8(ascii: "0"), count: Self.digitCount)
        for i in stride(from: Self.digitCount - 1, through: 0, by: -1) {
            out[i] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
        digits = String(decoding: out, as: UTF8.self)
    }

    /// What a person typed: the 32 digits, with or without spaces between them.
    public init(typed text: String) throws(KeychainError) {
        var out: [UInt8] = []
        for byte in text.utf8 where byte != UInt8(ascii: " ") {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else {
                throw KeychainError.param("a fingerprint is 32 digits; spaces may separate them, nothing else")
            }
            out.append(byte)
            guard out.count <= Self.digitCount else { break }
        }
        guard out.count == Self.digitCount else {
            throw KeychainError.param("a fingerprint is all \(Self.digitCount) digits, not \(out.count)")
        }
        digits = String(decoding: out, as: UTF8.self)
    }

    /// Eight groups of four, as commands print it.
    public var description: String {
        var groups: [Substring] = []
        var rest = Substring(digits)
        while !rest.isEmpty {
            groups.append(rest.prefix(4))
            rest = rest.dropFirst(4)
        }
        return groups.joined(separator: " ")
    }

    private static let modulus: UInt128 = {
        var m: UInt128 = 1
        for _ in 0..<digitCount { m *= 10 }
        return m
    }()
}
