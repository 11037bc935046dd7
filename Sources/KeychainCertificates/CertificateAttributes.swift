import Crypto
import KeychainModel
import SwiftASN1
import X509

/// The attributes of a certificate item that the certificate itself determines, derived as
/// Apple's SecCertificateCopyAttributeDictionary derives them (docs/keys.md, "Certificates and
/// identities"), plus keychaind's `spkh`.
///
/// On Apple platforms the client library parses a SecCertificateRef; keychaind receives only
/// DER, so the daemon parses it: without these, every certificate would have an empty issuer
/// and serial number (the class's primary key) and no public-key hash to form an identity.
public struct CertificateAttributes: Sendable, Equatable {
    /// ctyp: the X.509 version as CSSM numbers it (1, 2 or 3; the DER field holds 0, 1 or 2).
    public let certificateType: Int64
    /// cenc: CSSM_CERT_ENCODING_DER, the only encoding stored.
    public static let derEncoding: Int64 = 3
    /// subj and issr: the Name's content (no outer SEQUENCE header), normalized (NormalizedName).
    public let subject: [UInt8]
    public let issuer: [UInt8]
    /// slnr: the serial number INTEGER's content bytes, leading zero included.
    public let serialNumber: [UInt8]
    /// skid: the subject key identifier extension's key identifier, if there is one.
    public let subjectKeyID: [UInt8]?
    /// pkhh: SHA-1 of the subjectPublicKey BIT STRING's bytes (an EC point, a PKCS#1
    /// RSAPublicKey, 32 Ed25519 bytes): the same bytes whose SHA-1 a key's klbl is.
    public let publicKeyHash: [UInt8]
    /// spkh (keychaind): SHA-256 of the whole SubjectPublicKeyInfo DER, the value HTTPS
    /// clients pin (RFC 7469).
    public let subjectPublicKeyInfoHash: [UInt8]
    /// What Apple's client puts in labl when the caller gives none (SubjectSummary).
    public let summary: String?

    /// Codes of the attributes derived here (labl is only a default and not among them).
    public static let derivedCodes: [String] = ["ctyp", "cenc", "subj", "issr", "slnr", "skid", "pkhh", "spkh"]

    /// Parses `der`, one DER-encoded X.509 certificate and nothing else. errSecUnknownFormat
    /// for anything else (PEM, a truncated or altered certificate, trailing bytes, a public key
    /// algorithm swift-certificates does not know).
    public init(der: some Collection<UInt8>) throws(KeychainError) {
        let bytes = Array(der)
        guard bytes.first == 0x30 else {
            let pem = bytes.starts(with: Array("-----BEGIN".utf8))
            throw KeychainError(.unknownFormat, pem
                ? "the certificate is PEM: keychaind stores DER (`keychain cert add` converts PEM)"
                : "the certificate is not DER: it does not start with a SEQUENCE")
        }
        let certificate: Certificate
        let tbs: TBSFields
        do {
            certificate = try Certificate(derEncoded: bytes)
            tbs = try TBSFields(certificate.tbsCertificateBytes)
        } catch {
            throw KeychainError(.unknownFormat, "the certificate is not a valid DER X.509 certificate: \(Self.reason(error))")
        }
        certificateType = tbs.version + 1
        subject = tbs.subject
        issuer = tbs.issuer
        serialNumber = tbs.serialNumber
        publicKeyHash = Array(Insecure.SHA1.hash(data: tbs.subjectPublicKey))
        subjectPublicKeyInfoHash = Array(SHA256.hash(data: tbs.subjectPublicKeyInfo))
        do {
            subjectKeyID = try certificate.extensions.subjectKeyIdentifier.map { Array($0.keyIdentifier) }
            summary = Self.summary(of: certificate.subject,
                                   alternativeNames: try certificate.extensions.subjectAlternativeNames.map(Array.init) ?? [])
        } catch {
            throw KeychainError(.unknownFormat, "the certificate has a malformed extension: \(Self.reason(error))")
        }
    }

    /// The derived attributes as an item's attribute dictionary (skid only when present).
    public var attributes: AttributeDictionary {
        var out: AttributeDictionary = [
            "ctyp": .int(certificateType), "cenc": .int(Self.derEncoding),
            "subj": .data(subject), "issr": .data(issuer), "slnr": .data(serialNumber),
            "pkhh": .data(publicKeyHash), "spkh": .data(subjectPublicKeyInfoHash),
        ]
        if let subjectKeyID { out["skid"] = .data(subjectKeyID) }
        return out
    }

    /// Apple's subject summary, in its order of preference: the common names (last first),
    /// else the first e-mail address, else the first DNS name of the alternative names, else
    /// the organizational units, else the organizations. (Apple also appends a Description
    /// attribute to a common name; keychaind does not.)
    static func summary(of name: DistinguishedName, alternativeNames: [GeneralName]) -> String? {
        func values(_ type: ASN1ObjectIdentifier) -> [String] {
            name.flatMap { $0 }.filter { $0.type == type }.compactMap { String($0.value) }
        }
        let commonNames = values(.RDNAttributeType.commonName)
        if !commonNames.isEmpty { return commonNames.reversed().joined(separator: ", ") }
        for case .rfc822Name(let email) in alternativeNames { return email }
        for case .dnsName(let host) in alternativeNames { return host }
        for type in [ASN1ObjectIdentifier.RDNAttributeType.organizationalUnitName, .RDNAttributeType.organizationName] {
            let found = values(type)
            if !found.isEmpty { return found.reversed().joined(separator: ", ") }
        }
        return nil
    }

    /// A short reason from a parser's error, without echoing input bytes back.
    private static func reason(_ error: any Error) -> String {
        switch error {
        case let e as ASN1Error: "\(e.code)"
        case let e as CertificateError: "\(e.code)"
        default: "malformed"
        }
    }
}

/// The TBSCertificate fields Apple takes as raw bytes, read straight from the DER that
/// swift-certificates has already validated (its parsed types re-encode rather than keep them).
struct TBSFields {
    var version: Int64 = 0
    var serialNumber: [UInt8] = []
    var issuer: [UInt8] = []
    var subject: [UInt8] = []
    var subjectPublicKeyInfo: [UInt8] = []
    var subjectPublicKey: [UInt8] = []

    init(_ tbsBytes: ArraySlice<UInt8>) throws {
        let tbs = try DER.parse(tbsBytes)
        guard case .constructed(let children) = tbs.content else { throw ASN1Error.invalidASN1Object(reason: "TBSCertificate") }
        var nodes = children.makeIterator()
        var node = try Self.next(&nodes)
        if node.identifier == ASN1Identifier(tagWithNumber: 0, tagClass: .contextSpecific) {
            var explicit = node.content.constructedNodes
            guard let inner = explicit?.next() else {
                throw ASN1Error.invalidASN1Object(reason: "version")
            }
            version = Int64(try Int(derEncoded: inner))
            node = try Self.next(&nodes)
        }
        guard case .primitive(let serial) = node.content else { throw ASN1Error.invalidASN1Object(reason: "serialNumber") }
        serialNumber = Array(serial)
        _ = try Self.next(&nodes)  // signature algorithm
        issuer = try NormalizedName.content(of: try Self.next(&nodes))
        _ = try Self.next(&nodes)  // validity
        subject = try NormalizedName.content(of: try Self.next(&nodes))
        let spki = try Self.next(&nodes)
        subjectPublicKeyInfo = Array(spki.encodedBytes)
        guard case .constructed(let spkiParts) = spki.content else { throw ASN1Error.invalidASN1Object(reason: "SubjectPublicKeyInfo") }
        var parts = spkiParts.makeIterator()
        _ = try Self.next(&parts)  // algorithm
        subjectPublicKey = Array(try ASN1BitString(derEncoded: try Self.next(&parts)).bytes)
    }

    static func next(_ nodes: inout ASN1NodeCollection.Iterator) throws -> ASN1Node {
        guard let node = nodes.next() else { throw ASN1Error.invalidASN1Object(reason: "TBSCertificate is short") }
        return node
    }
}

extension ASN1Node.Content {
    /// The children of a constructed node, nil for a primitive one.
    var constructedNodes: ASN1NodeCollection.Iterator? {
        guard case .constructed(let nodes) = self else { return nil }
        return nodes.makeIterator()
    }
}
