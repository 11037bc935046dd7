import Crypto
import KeychainModel
import SwiftASN1
import Testing
import X509
@testable import PKCS10

/// PKCS#10 requests whose signature comes from a signing call, as `keychain csr` makes them;
/// swift-certificates reads each one back as an independent parser.
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
        #expect(request.publicKey == Certificate.PublicKey(key.publicKey))
        #expect(request.publicKey.isValidSignature(request.signature, for: request))
    }

    /// What swift-certificates wrote for the same request before `keychain csr` stopped linking
    /// it: DER is canonical, so the hand-written encoder must give the same bytes.
    @Test func theDERIsWhatSwiftCertificatesWritesForTheSameRequest() throws {
        let key = Curve25519.Signing.PrivateKey()
        let subject = "CN=Doe\\, Jane,OU=Ops,O=Example,L=Berlin,ST=BE,C=DE,DC=example,EMAILADDRESS=jane@example.test"
        let ours = try CertificateRequest.make(subject: subject, keyType: .ed25519, publicKey: Array(key.publicKey.rawRepresentation)) { bytes in
            Array(try key.signature(for: bytes))
        }
        let parsed = try CertificateSigningRequest(derEncoded: ours)
        var serializer = DER.Serializer()
        try serializer.serialize(parsed)
        #expect(serializer.serializedBytes == ours)
        #expect(Array(parsed.subject).count == 8)
    }

    @Test func anX25519KeyCannotMakeARequest() {
        let error = #expect(throws: KeychainError.self) {
            try CertificateRequest.make(subject: "CN=x", keyType: .x25519, publicKey: Array(repeating: 9, count: 32)) { _ in [] }
        }
        #expect(error?.status == .param)
    }

    @Test(arguments: [(KeyType.p256, 64), (.p256, 33), (.ed25519, 31), (.ed25519, 33)])
    func aPublicKeyOfTheWrongShapeIsAParameterError(_ type: KeyType, _ length: Int) {
        let error = #expect(throws: KeychainError.self) {
            try CertificateRequest.make(subject: "CN=x", keyType: type, publicKey: [0x04] + Array(repeating: 9, count: length - 1)) { _ in [] }
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
        let der = try CertificateRequest.make(subject: "CN=Doe\\, Jane , O=Example,C=DE", keyType: .ed25519,
                                              publicKey: Array(repeating: 9, count: 32)) { _ in Array(repeating: 0, count: 64) }
        let name = try CertificateSigningRequest(derEncoded: der).subject
        #expect(name.description == "CN=Doe\\, Jane,O=Example,C=DE")
        #expect(Array(name).count == 3)
    }

    @Test(arguments: ["", "CN", "XX=1", "CN=", "C=Ä", "CN=a\\"])
    func malformedSubjectsAreParameterErrors(_ subject: String) {
        let error = #expect(throws: KeychainError.self) { try SubjectName.parse(subject) }
        #expect(error?.status == .param)
    }
}
