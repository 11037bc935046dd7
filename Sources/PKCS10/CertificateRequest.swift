import KeychainModel

/// A PKCS#10 certificate signing request (RFC 2986) for a key kept in keychaind: the request is
/// built here and its signature made by whoever holds the key (`sign`), so that the private key
/// never has to exist outside the daemon. P-256 signs with ecdsa-with-SHA256, Ed25519 with
/// Ed25519 (RFC 8410). Written out in DER by hand rather than with swift-certificates: the
/// `keychain` executable that makes requests is started for every `keychain get`, and
/// swift-certificates with swift-crypto and FoundationEssentials made up half the protocol
/// conformances the Swift runtime searches at each first cast (docs/performance.md).
public enum CertificateRequest {
    /// The request's DER. `subject` is an RFC 4514 string ("CN=api.example.com,O=Example":
    /// most specific first); `sign` returns the signature of the bytes it is given, as
    /// keychaind's sign operation does (DER ECDSA over their SHA-256, or 64 Ed25519 bytes).
    public static func make(subject: String, keyType: KeyType, publicKey: [UInt8],
                            sign: ([UInt8]) throws -> [UInt8]) throws(KeychainError) -> [UInt8] {
        let name = try SubjectName.parse(subject)
        let key = try SubjectPublicKey(keyType: keyType, publicKey: publicKey)
        let info = DER.sequence([
            DER.integerZero,                 // version v1
            name.der,
            key.der,
            DER.tagged(0xA0, []),            // attributes: [0] IMPLICIT SET OF, none
        ])
        let signature: [UInt8]
        do {
            signature = try sign(info)
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(.internal, "the certificate request could not be signed: \(error)")
        }
        return DER.sequence([info, DER.sequence([DER.oid(key.signatureAlgorithm)]), DER.bitString(signature)])
    }
}

/// The key's SubjectPublicKeyInfo and the signature algorithm it signs with.
struct SubjectPublicKey {
    let der: [UInt8]
    let signatureAlgorithm: [UInt64]

    static let ecPublicKey: [UInt64] = [1, 2, 840, 10045, 2, 1]
    static let prime256v1: [UInt64] = [1, 2, 840, 10045, 3, 1, 7]
    static let ecdsaWithSHA256: [UInt64] = [1, 2, 840, 10045, 4, 3, 2]
    static let ed25519: [UInt64] = [1, 3, 101, 112]

    // The bytes come from keychaind, which made the key; only their shape is checked here
    // (swift-crypto also checked that a P-256 point is on the curve: openssl and a CA do so
    // again when they read the request).
    init(keyType: KeyType, publicKey bytes: [UInt8]) throws(KeychainError) {
        switch keyType {
        case .p256:
            guard bytes.count == 65, bytes[0] == 0x04 else { throw KeychainError(.param, "the p256 public key is malformed") }
            der = DER.sequence([DER.sequence([DER.oid(Self.ecPublicKey), DER.oid(Self.prime256v1)]), DER.bitString(bytes)])
            signatureAlgorithm = Self.ecdsaWithSHA256
        case .ed25519:
            guard bytes.count == 32 else { throw KeychainError(.param, "the ed25519 public key is malformed") }
            der = DER.sequence([DER.sequence([DER.oid(Self.ed25519)]), DER.bitString(bytes)])
            signatureAlgorithm = Self.ed25519
        case .x25519:
            throw KeychainError(.param, "an X25519 key cannot sign: a certificate request needs an Ed25519 or P-256 key")
        }
    }
}

/// An RFC 4514 distinguished name string: `TYPE=value` pairs separated by commas, most
/// specific first (so "CN=host,O=Org" encodes O, then CN); `\,` and `\\` escape.
public struct SubjectName {
    /// Each attribute's type and DER value, in encoding order (least specific first).
    let attributes: [(type: [UInt64], value: [UInt8])]

    static let types: [String: [UInt64]] = [
        "CN": [2, 5, 4, 3], "O": [2, 5, 4, 10], "OU": [2, 5, 4, 11], "C": [2, 5, 4, 6],
        "L": [2, 5, 4, 7], "ST": [2, 5, 4, 8], "STREET": [2, 5, 4, 9],
        "DC": [0, 9, 2342, 19200300, 100, 1, 25], "EMAILADDRESS": [1, 2, 840, 113549, 1, 9, 1],
    ]

    /// The Name: a SEQUENCE of single-attribute RDNs (SETs).
    var der: [UInt8] {
        DER.sequence(attributes.map { DER.set([DER.sequence([DER.oid($0.type), $0.value])]) })
    }

    static func parse(_ text: String) throws(KeychainError) -> SubjectName {
        var attributes: [(type: [UInt64], value: [UInt8])] = []
        for part in try split(text) {
            guard let eq = part.firstIndex(of: "=") else {
                throw KeychainError(.param, "the subject part \"\(part)\" is not TYPE=value")
            }
            let typeName = part[..<eq].trimmingSpaces.uppercased()
            let value = String(part[part.index(after: eq)...].trimmingSpaces)
            guard let type = types[typeName] else {
                throw KeychainError(.param, "the subject attribute \(typeName) is not one of \(types.keys.sorted().joined(separator: ", "))")
            }
            guard !value.isEmpty else { throw KeychainError(.param, "the subject attribute \(typeName) is empty") }
            let bytes = Array(value.utf8)
            // Country names must be PrintableString (RFC 5280), e-mail addresses and domain
            // components IA5String; the rest UTF8String.
            let encoded: [UInt8]
            switch typeName {
            case "C":
                guard bytes.allSatisfy(isPrintable) else { throw unrepresentable(typeName) }
                encoded = DER.tagged(0x13, bytes)
            case "EMAILADDRESS", "DC":
                guard bytes.allSatisfy({ $0 < 0x80 }) else { throw unrepresentable(typeName) }
                encoded = DER.tagged(0x16, bytes)
            default:
                encoded = DER.tagged(0x0C, bytes)
            }
            attributes.append((type, encoded))
        }
        guard !attributes.isEmpty else { throw KeychainError(.param, "the subject is empty: give at least CN=...") }
        return SubjectName(attributes: attributes.reversed())
    }

    private static func unrepresentable(_ typeName: String) -> KeychainError {
        KeychainError(.param, "the subject attribute \(typeName) has characters its string type cannot hold")
    }

    /// PrintableString's alphabet (X.680 §41.4).
    private static func isPrintable(_ c: UInt8) -> Bool {
        switch c {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        default: Array(" '()+,-./:=?".utf8).contains(c)
        }
    }

    /// Splits on commas that are not escaped, removing the escapes.
    static func split(_ text: String) throws(KeychainError) -> [Substring] {
        var parts: [Substring] = []
        var current = ""
        var escaped = false
        for ch in text {
            if escaped {
                current.append(ch)
                escaped = false
            } else if ch == "\\" {
                escaped = true
            } else if ch == "," {
                parts.append(Substring(current))
                current = ""
            } else {
                current.append(ch)
            }
        }
        guard !escaped else { throw KeychainError(.param, "the subject ends with a lone backslash") }
        if !current.isEmpty || !parts.isEmpty { parts.append(Substring(current)) }
        return parts
    }
}

extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.first == " " { s = s.dropFirst() }
        while s.last == " " { s = s.dropLast() }
        return s
    }
}

/// The few DER encodings a request needs (X.690): definite lengths, minimal forms.
enum DER {
    static let integerZero: [UInt8] = [0x02, 0x01, 0x00]

    static func tagged(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] { [tag] + length(content.count) + content }
    static func sequence(_ elements: [[UInt8]]) -> [UInt8] { tagged(0x30, elements.flatMap { $0 }) }

    /// A SET OF, its elements in ascending order as DER requires.
    static func set(_ elements: [[UInt8]]) -> [UInt8] {
        tagged(0x31, elements.sorted { $0.lexicographicallyPrecedes($1) }.flatMap { $0 })
    }

    /// A BIT STRING of whole bytes (no unused bits).
    static func bitString(_ bytes: [UInt8]) -> [UInt8] { tagged(0x03, [0] + bytes) }

    static func oid(_ arcs: [UInt64]) -> [UInt8] {
        var body = base128(arcs[0] * 40 + arcs[1])
        for arc in arcs.dropFirst(2) { body += base128(arc) }
        return tagged(0x06, body)
    }

    private static func base128(_ value: UInt64) -> [UInt8] {
        var out = [UInt8(value & 0x7F)]
        var rest = value >> 7
        while rest > 0 {
            out.insert(UInt8(rest & 0x7F) | 0x80, at: 0)
            rest >>= 7
        }
        return out
    }

    private static func length(_ n: Int) -> [UInt8] {
        guard n >= 0x80 else { return [UInt8(n)] }
        var bytes: [UInt8] = []
        var rest = n
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }
}
