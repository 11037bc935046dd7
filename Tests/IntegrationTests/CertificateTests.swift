import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Certificates through the daemon and `keychain cert`: parsed on add, found by label and
/// pin, forming an identity with a private key (docs/keys.md, "Certificates and identities").
@Suite("Certificates and identities against the real daemon", .serialized)
struct CertificateTests {
    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Certificates").path
    let pemPath = directory + "/p256.pem"
    let derPath = directory + "/p256.der"
    var der: [UInt8] { get throws { Array(try Data(contentsOf: URL(fileURLWithPath: derPath))) } }

    /// `name.field` of Tests/Certificates/expected.txt (values openssl computed).
    func expected(_ field: String) throws -> [UInt8] {
        let text = try String(contentsOfFile: Self.directory + "/expected.txt", encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix(field + ":") })
        let hex = Array(line.split(separator: " ")[1].utf8)
        return stride(from: 0, to: hex.count, by: 2).map { UInt8(String(decoding: hex[$0...$0 + 1], as: UTF8.self), radix: 16)! }
    }

    @Test func certAddTakesPEMAndStoresTheDER() throws {
        let d = try RunningDaemon()
        let added = try d.cli(["cert", "add", pemPath, "--label", "web"])
        #expect(added.status == Exit.success, "\(added.stderr)")
        let got = try d.cli(["cert", "get", "--label", "web"])
        #expect(got.status == Exit.success)
        #expect(got.stdout == (try der))
        let pem = try d.cli(["cert", "get", "--label", "web", "--pem"])
        #expect(pem.text == (try String(contentsOfFile: pemPath, encoding: .utf8)))
    }

    @Test func certAddTakesDERAndLabelsItWithTheCommonName() throws {
        let d = try RunningDaemon()
        #expect(try d.cli(["cert", "add", derPath]).status == Exit.success)
        #expect(try d.cli(["cert", "get", "--label", "keychaind test  p256"]).stdout == (try der))
    }

    @Test func certListShowsTheLabelAndTheSHA256Pin() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["cert", "add", derPath, "--label", "web"])
        let list = try d.cli(["cert", "list"])
        #expect(list.status == Exit.success)
        let pin = Data(try expected("p256.spkh")).base64EncodedString()
        #expect(list.text.contains("web") && list.text.contains(pin), "\(list.text)")
    }

    @Test func aMalformedCertificateIsRefusedAsUnknownFormatAndNothingIsStored() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["cert", "add", "-"], input: Array(try der.dropLast(10)))
        #expect(r.status == Exit.other)
        #expect(r.stderr.contains("errSecUnknownFormat"), "\(r.stderr)")
        #expect(try d.cli(["cert", "list", "--json"]).text == "[]\n")
    }

    @Test func certDeleteRemovesIt() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["cert", "add", derPath, "--label", "web"])
        #expect(try d.cli(["cert", "delete", "--label", "web"]).status == Exit.success)
        #expect(try d.cli(["cert", "get", "--label", "web"]).status == Exit.notFound)
    }

    /// A P-256 private key imported (Apple's 97-byte form) and its certificate added, neither
    /// with an attribute beyond its label: the daemon derives klbl and pkhh, so the identity
    /// is found.
    @Test func anImportedKeyAndItsCertificateFormAnIdentity() throws {
        let d = try RunningDaemon()
        let connection = KeychainConnection(socketPath: d.socketPath)
        _ = try KeychainKey.importPrivateKey(SecretBytes(try expected("p256.private")), type: .p256, label: "tls key",
                                             connection: connection)
        #expect(try d.cli(["cert", "add", pemPath]).status == Exit.success)
        let found = try connection.copyMatching(["class": .string("idnt"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let identity)) = found else {
            Issue.record("expected one identity, got \(found)")
            return
        }
        #expect(identity["certdata"] == .data(try der))
        #expect(identity["pkhh"] == .data(try expected("p256.pkhh")))
    }
}
