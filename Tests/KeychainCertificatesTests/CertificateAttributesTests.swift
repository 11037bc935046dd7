@testable import KeychainCertificates
import KeychainModel
import Testing

/// The attributes of a certificate item as Apple's SecCertificateCopyAttributeDictionary
/// derives them, checked against values openssl computed (Tests/Certificates/expected.txt).
@Suite struct CertificateAttributesTests {
    static let all: [TestCertificate] = [.p256, .ed25519, .rsa]

    @Test(arguments: all)
    func publicKeyHashIsSHA1OfThePublicKeyBytes(_ cert: TestCertificate) throws {
        let attributes = try CertificateAttributes(der: try cert.der)
        #expect(attributes.publicKeyHash == (try cert.expected("pkhh")))
    }

    @Test(arguments: all)
    func spkhIsSHA256OfTheSubjectPublicKeyInfo(_ cert: TestCertificate) throws {
        #expect(try CertificateAttributes(der: try cert.der).subjectPublicKeyInfoHash == (try cert.expected("spkh")))
    }

    @Test(arguments: all)
    func serialNumberIsTheIntegersContentBytes(_ cert: TestCertificate) throws {
        #expect(try CertificateAttributes(der: try cert.der).serialNumber == (try cert.expected("slnr")))
    }

    @Test func subjectKeyIDIsTheExtensionsKeyIdentifierWhenPresent() throws {
        #expect(try CertificateAttributes(der: try TestCertificate.ed25519.der).subjectKeyID == (try TestCertificate.ed25519.expected("skid")))
        #expect(try CertificateAttributes(der: try TestCertificate.p256.der).subjectKeyID == nil)
    }

    @Test func certificateTypeIsTheCSSMVersionNumber() throws {
        #expect(try CertificateAttributes(der: try TestCertificate.p256.der).certificateType == 1)  // no version field: v1
        #expect(try CertificateAttributes(der: try TestCertificate.ed25519.der).certificateType == 3)
        #expect(try CertificateAttributes(der: try TestCertificate.ed25519.der).attributes["cenc"] == .int(3))
    }

    /// O=Example  Org, CN=keychaind test  p256, both PrintableString: upper-cased, blanks
    /// collapsed, lengths re-encoded; the outer SEQUENCE header left off, as Apple stores it.
    @Test func namesAreAppleNormalizedContent() throws {
        let attributes = try CertificateAttributes(der: try TestCertificate.p256.der)
        func rdn(_ oid: UInt8, _ text: String) -> [UInt8] {
            let value = [0x13, UInt8(text.utf8.count)] + Array(text.utf8)
            let pair = [0x06, 0x03, 0x55, 0x04, oid] + value
            let sequence = [0x30, UInt8(pair.count)] + pair
            return [0x31, UInt8(sequence.count)] + sequence
        }
        let expected = rdn(0x0a, "EXAMPLE ORG") + rdn(0x03, "KEYCHAIND TEST P256")
        #expect(attributes.subject == expected)
        #expect(attributes.issuer == expected)  // self-signed
    }

    @Test func printableTextIsUpperCasedWithBlanksCollapsedAndTrimmed() {
        #expect(NormalizedName.normalizedPrintable(Array("  a  b\t\tc ".utf8)) == Array("A B C".utf8))
        #expect(NormalizedName.normalizedPrintable(Array("   ".utf8)) == [])
    }

    @Test func summaryPrefersTheCommonNameThenAnEmailAddress() throws {
        #expect(try CertificateAttributes(der: try TestCertificate.p256.der).summary == "keychaind test  p256")
        #expect(try CertificateAttributes(der: try TestCertificate.rsa.der).summary == "rsa@example.org")
    }

    @Test func pemIsRefusedAsUnknownFormatNamingTheFix() throws {
        let pem = Array("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".utf8)
        let error = #expect(throws: KeychainError.self) { try CertificateAttributes(der: pem) }
        #expect(error?.status == .unknownFormat)
        #expect(error?.message.contains("PEM") == true)
    }

    @Test(arguments: [[], [0x30], [0x30, 0x03, 0x02, 0x01, 0x01], Array("not a certificate".utf8)])
    func malformedBytesAreUnknownFormat(_ bytes: [UInt8]) {
        let error = #expect(throws: KeychainError.self) { try CertificateAttributes(der: bytes) }
        #expect(error?.status == .unknownFormat)
    }

    @Test func aTruncatedCertificateIsUnknownFormat() throws {
        let der = try TestCertificate.ed25519.der
        let error = #expect(throws: KeychainError.self) { try CertificateAttributes(der: der.dropLast()) }
        #expect(error?.status == .unknownFormat)
    }

    @Test func trailingBytesAfterTheCertificateAreUnknownFormat() throws {
        let error = #expect(throws: KeychainError.self) { try CertificateAttributes(der: try TestCertificate.ed25519.der + [0]) }
        #expect(error?.status == .unknownFormat)
    }

    /// Random damage (bytes changed, inserted, removed; cut short) to each certificate,
    /// from a fixed seed: an error or a parse, never a crash.
    @Test(arguments: all)
    func randomlyDamagedCertificatesAreHandled(_ cert: TestCertificate) throws {
        var rng = SplitMix64(seed: 17)
        let der = try cert.der
        for _ in 0..<3000 {
            var bad = der
            for _ in 0...Int.random(in: 0..<4, using: &rng) {
                let i = Int.random(in: 0..<bad.count, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: bad[i] = UInt8.random(in: 0...255, using: &rng)
                case 1: bad.insert(UInt8.random(in: 0...255, using: &rng), at: i)
                case 2: bad.remove(at: i)
                default: bad = Array(bad[..<max(i, 1)])
                }
            }
            _ = try? CertificateAttributes(der: bad)
        }
    }

    /// Every byte of a certificate flipped in turn: an error or a parse, never a crash.
    @Test func everySingleByteCorruptionIsHandled() throws {
        let der = try TestCertificate.ed25519.der
        for i in der.indices {
            var bad = der
            bad[i] ^= 0xff
            _ = try? CertificateAttributes(der: bad)
        }
    }
}

/// A small seeded generator, so that a failing damage test fails the same way again.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
