import KeychainModel
import Testing
@testable import KeychainStore
import StoreTestSupport

/// Certificate items describe their DER: the store derives Apple's attributes on add and on
/// an update of v_Data (docs/keys.md, "Certificates and identities").
@Suite struct CertificateItemTests {
    let cert: AttributeDictionary = ["class": .string("cert")]

    func add(_ t: TemporaryStore, _ der: [UInt8], _ extra: AttributeDictionary = [:]) throws {
        try t.add(cert.merging(["v_Data": .data(der)]) { $1 }.merging(extra) { $1 })
    }

    @Test func anAddedCertificateGetsTheAttributesAppleDerives() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.ed25519DER)
        let attrs = try #require(try t.attributes(cert))
        #expect(attrs["ctyp"] == .int(3))
        #expect(attrs["cenc"] == .int(3))
        #expect(attrs["slnr"] == .data(try TestCertificate.ed25519.expected("slnr")))
        #expect(attrs["skid"] == .data(try TestCertificate.ed25519.expected("skid")))
        #expect(attrs["pkhh"] == .data(TestCertificate.ed25519KeyID))
        #expect(attrs["spkh"] == .data(try TestCertificate.ed25519.expected("spkh")))
        #expect(attrs["subj"] != nil && attrs["subj"] == attrs["issr"])  // self-signed
    }

    @Test func theLabelDefaultsToTheSubjectsCommonName() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.p256DER)
        #expect(try t.attributes(cert)?["labl"] == .string("keychaind test  p256"))
    }

    @Test func aLabelTheCallerGivesIsKept() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.p256DER, ["labl": .string("web")])
        #expect(try t.attributes(cert)?["labl"] == .string("web"))
    }

    @Test func aCertificateIsFoundByTheSHA256OfItsPublicKeyInfo() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.p256DER)
        try add(t, TestCertificate.ed25519DER)
        let pin = try TestCertificate.ed25519.expected("spkh")
        #expect(try t.secret(cert.merging(["spkh": .data(pin)]) { $1 }) == TestCertificate.ed25519DER)
    }

    @Test func malformedDERIsUnknownFormatAndStoresNothing() throws {
        let t = try TemporaryStore()
        expectStatus(.unknownFormat) { try add(t, Array(TestCertificate.p256DER.dropLast(3))) }
        expectStatus(.unknownFormat) { try add(t, Array("-----BEGIN CERTIFICATE-----\n".utf8)) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func aCertificateWithoutDataIsAParameterError() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(cert) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func aCallerValueThatContradictsTheCertificateIsRefused() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try add(t, TestCertificate.p256DER, ["pkhh": .data([7])]) }
        expectStatus(.param) { try add(t, TestCertificate.p256DER, ["slnr": .data([1])]) }
        expectStatus(.param) { try add(t, TestCertificate.p256DER, ["skid": .data([1])]) }  // it has none
        #expect(try t.store.itemCount() == 0)
    }

    @Test func aCallerValueEqualToTheDerivedOneIsAccepted() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.p256DER, ["pkhh": .data(TestCertificate.p256KeyID), "ctyp": .string("1")])
        #expect(try t.store.itemCount() == 1)
    }

    /// The one rule for derived attributes, as for a key's (docs/semantics.md, deviations).
    @Test(arguments: [
        ("ctyp", AttributeValue.int(1)), ("cenc", .int(1)), ("subj", .data([1])), ("issr", .data([1])),
        ("slnr", .data([1])), ("skid", .data([1])), ("pkhh", .data([7])), ("spkh", .data([1])),
    ])
    func eachDerivedAttributeWithAnotherValueIsErrSecParam(_ code: String, _ value: AttributeValue) throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try add(t, TestCertificate.ed25519DER, [code: value]) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func everyDerivedAttributeWithItsDerivedValueIsAccepted() throws {
        let first = try TemporaryStore(), t = try TemporaryStore()
        try add(first, TestCertificate.ed25519DER)
        let derived = try #require(try first.attributes(cert)).filter { ["ctyp", "cenc", "subj", "issr", "slnr", "skid", "pkhh", "spkh"].contains($0.key) }
        #expect(derived.count == 8)
        try add(t, TestCertificate.ed25519DER, derived)
        #expect(try t.store.itemCount() == 1)
    }

    @Test func updatingTheDataDerivesTheAttributesAgain() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.p256DER, ["labl": .string("rotating")])
        try t.store.items.update(["class": .string("cert"), "labl": .string("rotating")],
                           changes: ["v_Data": .data(TestCertificate.ed25519DER)], scope: TemporaryStore.app)
        let attrs = try #require(try t.attributes(cert))
        #expect(attrs["pkhh"] == .data(TestCertificate.ed25519KeyID))
        #expect(attrs["skid"] == .data(try TestCertificate.ed25519.expected("skid")))
        #expect(attrs["labl"] == .string("rotating"))
        try t.store.items.update(["class": .string("cert")], changes: ["v_Data": .data(TestCertificate.p256DER)], scope: TemporaryStore.app)
        #expect(try t.attributes(cert)?["skid"] == nil)  // the P-256 certificate has none
    }

    @Test func anUpdateToMalformedDataOrAContradictingValueChangesNothing() throws {
        let t = try TemporaryStore()
        try add(t, TestCertificate.p256DER)
        expectStatus(.unknownFormat) {
            try t.store.items.update(cert, changes: ["v_Data": .data([0x30, 0x00])], scope: TemporaryStore.app)
        }
        expectStatus(.param) { try t.store.items.update(cert, changes: ["slnr": .data([9])], scope: TemporaryStore.app) }
        #expect(try t.secret(cert) == TestCertificate.p256DER)
        #expect(try t.attributes(cert)?["slnr"] == .data(try TestCertificate.p256.expected("slnr")))
    }

    /// The caller names no pkhh: the one derived from the certificate meets the key's klbl.
    @Test func aCertificateForAPrivateKeyFormsAnIdentityWithNoExtraAttributes() throws {
        let t = try TemporaryStore()
        let privateKey = try TestCertificate.p256.expected("private")
        try t.add(["class": .string("keys"), "v_Data": .data(privateKey), "klbl": .data(TestCertificate.p256KeyID),
                   "kcls": .int(1), "priv": .int(1), "type": .int(73), "bsiz": .int(256)])
        try add(t, TestCertificate.p256DER)
        let result = try t.copy(["class": .string("idnt"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let attrs)) = result else {
            Issue.record("expected one identity, got \(result)")
            return
        }
        #expect(attrs["certdata"] == .data(TestCertificate.p256DER))
        #expect(attrs["labl"] == .string("keychaind test  p256"))
    }
}
