#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Crypto
import KeychainModel
import SwiftASN1
import X509

/// A PKCS#10 certificate signing request for a key kept in keychaind: the request is built
/// here and its signature made by whoever holds the key (`sign`), so that the private key
/// never has to exist outside the daemon. P-256 signs with ecdsa-with-SHA256, Ed25519 with
/// Ed25519 (RFC 8410).
public enum CertificateRequest {
    /// The request's DER. `subject` is an RFC 4514 string ("CN=api.example.com,O=Example":
    /// most specific first); `sign` returns the signature of the bytes it is given, as
    /// keychaind's sign operation does (DER ECDSA over their SHA-256, or 64 Ed25519 bytes).
    public static func make(subject: String, keyType: KeyType, publicKey: [UInt8],
                            sign: @escaping @Sendable ([UInt8]) throws -> [UInt8]) throws(KeychainError) -> [UInt8] {
        let name = try SubjectName.parse(subject)
        let key = try RemoteSigningKey(keyType: keyType, publicKey: publicKey, sign: sign)
        do {
            let request = try CertificateSigningRequest(
                version: .v1, subject: name, privateKey: Certificate.PrivateKey(key),
                attributes: CertificateSigningRequest.Attributes(), signatureAlgorithm: key.defaultSignatureAlgorithm)
            var serializer = DER.Serializer()
            try serializer.serialize(request)
            return serializer.serializedBytes
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(.internal, "the certificate request could not be built: \(error)")
        }
    }

    /// `der` as a PEM "CERTIFICATE REQUEST" block.
    public static func pem(_ der: [UInt8]) -> String {
        PEMDocument(type: "CERTIFICATE REQUEST", derBytes: der).pemString + "\n"
    }
}

/// A private key seen only through its public key and a signing call.
struct RemoteSigningKey: CustomPrivateKey {
    let publicKey: Certificate.PublicKey
    let defaultSignatureAlgorithm: Certificate.SignatureAlgorithm
    let sign: @Sendable ([UInt8]) throws -> [UInt8]

    init(keyType: KeyType, publicKey bytes: [UInt8], sign: @escaping @Sendable ([UInt8]) throws -> [UInt8]) throws(KeychainError) {
        do {
            switch keyType {
            case .p256:
                publicKey = Certificate.PublicKey(try P256.Signing.PublicKey(x963Representation: bytes))
                defaultSignatureAlgorithm = .ecdsaWithSHA256
            case .ed25519:
                publicKey = Certificate.PublicKey(try Curve25519.Signing.PublicKey(rawRepresentation: bytes))
                defaultSignatureAlgorithm = .ed25519
            case .x25519:
                throw KeychainError(.param, "an X25519 key cannot sign: a certificate request needs an Ed25519 or P-256 key")
            }
        } catch let error as KeychainError {
            throw error
        } catch {
            throw KeychainError(.param, "the \(keyType.rawValue) public key is malformed")
        }
        self.sign = sign
    }

    var supportedSignatureAlgorithms: [Certificate.SignatureAlgorithm] { [defaultSignatureAlgorithm] }

    func signSynchronously(bytes: some DataProtocol, signatureAlgorithm: Certificate.SignatureAlgorithm) throws -> Certificate.Signature {
        guard signatureAlgorithm == defaultSignatureAlgorithm else {
            throw KeychainError(.param, "this key signs with \(defaultSignatureAlgorithm) only")
        }
        let signature = try sign(Array(bytes))
        return try Certificate.Signature(signatureAlgorithm: signatureAlgorithm, signatureBytes: ASN1BitString(bytes: signature[...]))
    }

    static func == (a: RemoteSigningKey, b: RemoteSigningKey) -> Bool { a.publicKey == b.publicKey }
    func hash(into hasher: inout Hasher) { hasher.combine(publicKey) }

    // The protocol asks for a serialization of the private key, which does not exist here.
    static var defaultPEMDiscriminator: String { "PRIVATE KEY" }
    func serialize(into coder: inout DER.Serializer) throws {
        throw KeychainError(.param, "a keychaind key is not serialized: its private bytes stay in the daemon")
    }
}

/// An RFC 4514 distinguished name string: `TYPE=value` pairs separated by commas, most
/// specific first (so "CN=host,O=Org" encodes O, then CN); `\,` and `\\` escape.
enum SubjectName {
    static let types: [String: ASN1ObjectIdentifier] = [
        "CN": .RDNAttributeType.commonName, "O": .RDNAttributeType.organizationName,
        "OU": .RDNAttributeType.organizationalUnitName, "C": .RDNAttributeType.countryName,
        "L": .RDNAttributeType.localityName, "ST": .RDNAttributeType.stateOrProvinceName,
        "STREET": .RDNAttributeType.streetAddress, "DC": .RDNAttributeType.domainComponent,
        "EMAILADDRESS": .RDNAttributeType.emailAddress,
    ]

    static func parse(_ text: String) throws(KeychainError) -> DistinguishedName {
        var rdns: [RelativeDistinguishedName] = []
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
            let attribute: RelativeDistinguishedName.Attribute
            do {
                // Country names must be PrintableString (RFC 5280), e-mail addresses IA5String.
                switch typeName {
                case "C": attribute = try .init(type: type, printableString: value)
                case "EMAILADDRESS", "DC": attribute = try .init(type: type, ia5String: value)
                default: attribute = .init(type: type, utf8String: value)
                }
            } catch {
                throw KeychainError(.param, "the subject attribute \(typeName) has characters its string type cannot hold")
            }
            rdns.append(RelativeDistinguishedName(attribute))
        }
        guard !rdns.isEmpty else { throw KeychainError(.param, "the subject is empty: give at least CN=...") }
        return DistinguishedName(rdns.reversed())
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
