import Foundation
import KeychainClient
import KeychainModel
import Testing

/// A service's mTLS identity whose private key never leaves keychaind: generate a key, make a
/// CSR signed inside the daemon, have a throwaway CA (openssl) sign it, add the certificate,
/// find the identity (docs/keys.md, "Certificates and identities").
@Suite("keychain csr against the real daemon and openssl", .serialized)
struct CertificateRequestEndToEndTests {
    /// A scratch directory, removed when the test ends.
    final class Scratch {
        let path: String
        init() throws {
            path = NSTemporaryDirectory() + "kc-csr-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: path) }
        func write(_ name: String, _ bytes: [UInt8]) throws -> String {
            let file = path + "/" + name
            try Data(bytes).write(to: URL(fileURLWithPath: file))
            return file
        }
    }

    func openssl(_ arguments: [String]) throws -> CLIResult {
        try runExecutable("/usr/bin/openssl", arguments, environment: ["PATH": "/usr/bin:/bin"], input: [])
    }

    @Test(arguments: ["p256", "ed25519"])
    func aCSRFromAKeychainKeyBecomesAnIdentity(_ type: String) throws {
        let d = try RunningDaemon()
        let scratch = try Scratch()
        let generated = try d.cli(["key", "generate", "--type", type, "--label", "tls"])
        #expect(generated.status == Exit.success, "\(generated.stderr)")

        let csr = try d.cli(["csr", "--key", "tls", "--subject", "CN=api.example.test,O=Example"])
        #expect(csr.status == Exit.success, "\(csr.stderr)")
        #expect(csr.text.hasPrefix("-----BEGIN CERTIFICATE REQUEST-----\n"))
        let csrPath = try scratch.write("req.pem", csr.stdout)

        // openssl checks the request's self-signature and reads the subject as given.
        let verified = try openssl(["req", "-in", csrPath, "-verify", "-noout", "-subject"])
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect((verified.stderr + verified.text).contains("verify OK"), "\(verified.stderr)")
        #expect(verified.text.contains("O = Example, CN = api.example.test"), "\(verified.text)")

        // A throwaway CA signs it.
        let caKey = scratch.path + "/ca.key", caCert = scratch.path + "/ca.pem", cert = scratch.path + "/cert.pem"
        #expect(try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", caKey,
                             "-out", caCert, "-subj", "/CN=Throwaway CA", "-days", "1"]).status == 0)
        let signed = try openssl(["x509", "-req", "-in", csrPath, "-CA", caCert, "-CAkey", caKey, "-set_serial", "7",
                                  "-days", "1", "-out", cert])
        #expect(signed.status == 0, "\(signed.stderr)")

        #expect(try d.cli(["cert", "add", cert]).status == Exit.success)
        let connection = KeychainConnection(socketPath: d.socketPath)
        let key = try #require(try KeychainKey.find(label: "tls", connection: connection).first)
        let found = try connection.copyMatching(["class": .string("idnt"), "labl": .string("api.example.test"),
                                                 "r_Attributes": .bool(true)])
        guard case .single(.attributes(let identity)) = found else {
            Issue.record("expected one identity, got \(found)")
            return
        }
        #expect(identity["pkhh"] == key.attributes["klbl"])
        #expect(identity["v_Data"] == nil)  // a non-extractable key's bytes are in no answer
    }

    @Test func aCSRForAMissingKeyIsNotFound() throws {
        let d = try RunningDaemon()
        let r = try d.cli(["csr", "--key", "nothing", "--subject", "CN=x"])
        #expect(r.status == Exit.notFound)
    }

    @Test func aBadSubjectIsAUsageError() throws {
        let d = try RunningDaemon()
        _ = try d.cli(["key", "generate", "--type", "ed25519", "--label", "k"])
        let r = try d.cli(["csr", "--key", "k", "--subject", "NOPE=x"])
        #expect(r.status == Exit.usage)
        #expect(r.stderr.contains("NOPE"))
    }
}
