import SwiftASN1

/// A Name in the form Apple stores as a certificate's subj and issr: the content of the Name
/// SEQUENCE (its RDN SETs, without the SEQUENCE's own tag and length), with every
/// PrintableString value upper-cased (ASCII letters only), runs of blanks made one space and
/// leading and trailing blanks removed, as RFC 5280 7.1 allows comparing them (Apple's
/// createNormalizedX501Name). Values of other string types are kept byte for byte.
///
/// So `CN=web  server` and `CN=WEB SERVER` in PrintableString are one issuer, as on Apple
/// platforms, and a query must give the normalized bytes.
enum NormalizedName {
    static func content(of name: ASN1Node) throws -> [UInt8] {
        guard name.identifier == .sequence, case .constructed(let rdns) = name.content else {
            throw ASN1Error.invalidASN1Object(reason: "Name is not a SEQUENCE")
        }
        var out: [UInt8] = []
        for rdn in rdns {
            guard rdn.identifier == .set, case .constructed(let pairs) = rdn.content else {
                throw ASN1Error.invalidASN1Object(reason: "RDN is not a SET")
            }
            var set: [UInt8] = []
            for pair in pairs {
                guard pair.identifier == .sequence, case .constructed(let fields) = pair.content else {
                    throw ASN1Error.invalidASN1Object(reason: "AttributeTypeAndValue is not a SEQUENCE")
                }
                var parts = fields.makeIterator()
                guard let type = parts.next(), let value = parts.next(), parts.next() == nil else {
                    throw ASN1Error.invalidASN1Object(reason: "AttributeTypeAndValue has not two fields")
                }
                var body = Array(type.encodedBytes)
                if value.identifier == .printableString, case .primitive(let text) = value.content {
                    body += DERBytes.tagged(0x13, normalizedPrintable(text))
                } else {
                    body += value.encodedBytes
                }
                set += DERBytes.tagged(0x30, body)
            }
            guard !set.isEmpty else { throw ASN1Error.invalidASN1Object(reason: "empty RDN") }
            out += DERBytes.tagged(0x31, set)
        }
        return out
    }

    /// Upper-cases a-z, turns each run of spaces and tabs into one space, trims both ends.
    static func normalizedPrintable(_ text: some Collection<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var pendingBlank = false
        for byte in text {
            if byte == 0x20 || byte == 0x09 {
                pendingBlank = !out.isEmpty
                continue
            }
            if pendingBlank { out.append(0x20) }
            pendingBlank = false
            out.append((0x61...0x7a).contains(byte) ? byte - 0x20 : byte)
        }
        return out
    }
}

/// DER's tag-length-value framing, for re-encoding the parts that normalization shortened.
enum DERBytes {
    static func tagged(_ tag: UInt8, _ content: [UInt8]) -> [UInt8] {
        [tag] + length(content.count) + content
    }

    static func length(_ n: Int) -> [UInt8] {
        if n < 0x80 { return [UInt8(n)] }
        var bytes: [UInt8] = []
        var rest = n
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xff), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }
}
