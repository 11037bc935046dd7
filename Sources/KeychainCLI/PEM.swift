import KeychainModel

/// PEM (RFC 7468) for the certificate commands: `keychain cert add` accepts PEM or DER and
/// sends DER (what keychaind stores); `cert get --pem` prints it back as PEM.
enum PEM {
    /// The DER of the first `label` block of `text`, or `text` itself when it is not PEM.
    /// errSecUnknownFormat for a PEM block that is not valid base64 or holds another label.
    static func der(from bytes: [UInt8], label: String) throws(KeychainError) -> [UInt8] {
        guard bytes.first != 0x30, let pemStart = find(Array("-----BEGIN ".utf8), in: bytes, from: 0) else { return bytes }
        let begin = Array("-----BEGIN \(label)-----".utf8), end = Array("-----END \(label)-----".utf8)
        guard let start = find(begin, in: bytes, from: pemStart), let stop = find(end, in: bytes, from: start + begin.count) else {
            throw KeychainError(.unknownFormat, "the file is PEM but has no \(label) block")
        }
        guard let der = base64Decode(bytes[(start + begin.count)..<stop]), !der.isEmpty else {
            throw KeychainError(.unknownFormat, "the \(label) block is not valid base64")
        }
        return der
    }

    /// Where `pattern` first occurs in `bytes` at or after `from`.
    private static func find(_ pattern: [UInt8], in bytes: [UInt8], from: Int) -> Int? {
        guard bytes.count >= pattern.count, from <= bytes.count - pattern.count else { return nil }
        return (from...(bytes.count - pattern.count)).first { bytes[$0..<($0 + pattern.count)].elementsEqual(pattern) }
    }

    /// `der` as one PEM block, 64 characters a line.
    static func encode(_ der: [UInt8], label: String) -> String {
        let body = JSON.base64(der)
        var lines = ["-----BEGIN \(label)-----"]
        var rest = Substring(body)
        while !rest.isEmpty {
            lines.append(String(rest.prefix(64)))
            rest = rest.dropFirst(64)
        }
        lines.append("-----END \(label)-----")
        return lines.joined(separator: "\n") + "\n"
    }

    /// Standard base64, white space ignored, padding optional; nil for any other character.
    static func base64Decode(_ text: ArraySlice<UInt8>) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.count * 3 / 4)
        var buffer: UInt32 = 0, bits = 0, padding = 0
        for c in text {
            let value: UInt8
            switch c {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): value = c - UInt8(ascii: "A")
            case UInt8(ascii: "a")...UInt8(ascii: "z"): value = c - UInt8(ascii: "a") + 26
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = c - UInt8(ascii: "0") + 52
            case UInt8(ascii: "+"): value = 62
            case UInt8(ascii: "/"): value = 63
            case UInt8(ascii: "="): padding += 1; continue
            case UInt8(ascii: " "), UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: "\t"): continue
            default: return nil
            }
            guard padding == 0 else { return nil }  // data after padding
            buffer = buffer << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits)))
            }
        }
        return padding <= 2 ? out : nil
    }
}
