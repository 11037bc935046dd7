import Crypto
import KeychainModel
import SwiftASN1
import Testing
import X509
@testable import KeychainCertificates

/// PKCS#10 requests whose signature comes from a signing call, as `keychain csr` makes them.
@Suite struct CertificateRequestTests {
    @Test func aP256RequestCarriesTheSubjectAndKeyAndAValidSignature() throws {
        let key = P256.Signing.PrivateKey()
        let der = try CertificateRequest.make(subject: "CN=api.example.test,O=Example", keyType: .p256,
                                              publicKey: Array(key.publicKey.x963Representation)) { bytes in
            Array(try key.signature(for: bytes).derRepresentation)
        }
        let request = try CertificateSigningRequest(derEncoded: der)
        #expect(request.subject.description == "CN=api.example.test,O=Example")
        #expect(request.publicKey == Certificate.PublicKey(key.publicKey))
        #expect(request.signatureAlgorithm == .ecdsaWithSHA256)
        #expect(request.publicKey.isValidSignature(request.signature, for: request))
    }

    @Test func anEd25519RequestIsSignedWithEd25519() throws {
        let key = Curve25519.Signing.PrivateKey()
        let der = try CertificateRequest.make(subject: "CN=ed", keyType: .ed25519, publicKey: Array(key.publicKey.rawRepresentation)) { bytes in
            Array(try key.signature(for: bytes))
        }
        let request = try CertificateSigningRequest(derEncoded: der)
        #expect(request.signatureAlgorithm == .ed25519)
        #expect(request.publicKey.isValidSignature(request.signature, for: request))
    }

    @Test func anX25519KeyCannotMakeARequest() {
        let error = #expect(throws: KeychainError.self) {
            try CertificateRequest.make(subject: "CN=x", keyType: .x25519, publicKey: Array(repeating: 9, count: 32)) { _ in [] }
        }
        #expect(error?.status == .param)
    }

    @Test func aSigningFailureIsPassedOnAsItsOwnError() {
        let error = #expect(throws: KeychainError.self) {
            try CertificateRequest.make(subject: "CN=x", keyType: .ed25519, publicKey: Array(repeating: 9, count: 32)) { _ in
                throw KeychainError(.interactionNotAllowed, "locked")
            }
        }
        #expect(error?.status == .interactionNotAllowed)
    }

    @Test func subjectsAreRFC4514MostSpecificFirstWithEscapedCommas() throws {
        let name = try SubjectName.parse("CN=Doe\\, Jane , O=Example,C=DE")
        #expect(name.description == "CN=Doe\\, Jane,O=Example,C=DE")
        #expect(Array(name).count == 3)
    }

    @Test(arguments: ["", "CN", "XX=1", "CN=", "C=Ä", "CN=a\\"])
    func malformedSubjectsAreParameterErrors(_ subject: String) {
        let error = #expect(throws: KeychainError.self) { try SubjectName.parse(subject) }
        #expect(error?.status == .param)
    }
}
