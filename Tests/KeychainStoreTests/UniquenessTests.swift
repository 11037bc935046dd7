import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

@Suite("Primary keys follow Apple's per class")
struct UniquenessTests {
    @Test func genericPasswordKeyIsAccountAndServiceNotAccessibilityLabelOrData() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([1]), "labl": .string("one"), "pdmn": .string("ak")]))
        expectStatus(.duplicateItem) {
            try t.add(genp("s", "a", ["v_Data": .data([2]), "labl": .string("two"), "pdmn": .string("dk")]))
        }
        #expect(try t.secret(genp("s", "a")) == [1])
    }

    @Test func otherAccountOrServiceIsNoDuplicate() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        try t.add(genp("s", "b"))
        try t.add(genp("t", "a"))
        #expect(try t.count(["class": .string("genp")]) == 3)
    }

    @Test func itemsWithNoAccountAndNoServiceCollide() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("genp"), "v_Data": .data([1])])
        expectStatus(.duplicateItem) { try t.add(["class": .string("genp"), "v_Data": .data([2])]) }
    }

    @Test func synchronizableAndLocalItemsWithTheSameKeyCoexist() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["v_Data": .data([0])]))
        try t.add(genp("s", "a", ["v_Data": .data([1]), "sync": .bool(true)]))
        #expect(try t.secret(genp("s", "a")) == [0])
        #expect(try t.secret(genp("s", "a", ["sync": .bool(true)])) == [1])
    }

    @Test func twoAccessGroupsEachHoldTheSameAccountAndService() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a", ["agrp": .string("com.example.app"), "v_Data": .data([1])]))
        try t.add(genp("s", "a", ["agrp": .string("com.example.shared"), "v_Data": .data([2])]))
        #expect(try t.count(genp("s", "a")) == 2)
    }

    @Test func internetPasswordsDifferingOnlyInPortCoexist() throws {
        let t = try TemporaryStore()
        let base: AttributeDictionary = ["class": .string("inet"), "srvr": .string("h"), "acct": .string("u")]
        try t.add(base.merging(["port": .int(443)]) { $1 })
        try t.add(base.merging(["port": .int(8443)]) { $1 })
        expectStatus(.duplicateItem) { try t.add(base.merging(["port": .string("443")]) { $1 }) }
    }

    @Test func internetPasswordKeyIncludesProtocolPathAndAuthenticationType() throws {
        let t = try TemporaryStore()
        let base: AttributeDictionary = ["class": .string("inet"), "srvr": .string("h"), "acct": .string("u")]
        try t.add(base)
        try t.add(base.merging(["ptcl": .string("htps")]) { $1 })
        try t.add(base.merging(["path": .string("/x")]) { $1 })
        try t.add(base.merging(["atyp": .string("form")]) { $1 })
        try t.add(base.merging(["sdmn": .string("realm")]) { $1 })
        expectStatus(.duplicateItem) { try t.add(base.merging(["labl": .string("other label")]) { $1 }) }
    }

    /// The key is type, issuer and serial number, all derived from the DER: the same
    /// certificate twice is a duplicate whatever label it is given; another one is not.
    @Test func certificateKeyIsTypeIssuerAndSerial() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.ed25519DER)])
        expectStatus(.duplicateItem) {
            try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER), "labl": .string("again")])
        }
    }

    @Test func keyPrimaryKeyIncludesTypeSizeAndTag() throws {
        let t = try TemporaryStore()
        let base: AttributeDictionary = ["class": .string("keys"), "kcls": .int(2), "atag": .string("tag")]
        try t.add(base)
        try t.add(base.merging(["bsiz": .int(256)]) { $1 })
        try t.add(base.merging(["type": .int(42)]) { $1 })
        try t.add(base.merging(["crtr": .int(1)]) { $1 })
        expectStatus(.duplicateItem) { try t.add(base.merging(["sign": .bool(true)]) { $1 }) }
    }

    @Test func stringAndDataWithTheSameBytesAreTheSameAccount() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "alice"))
        expectStatus(.duplicateItem) {
            try t.add(["class": .string("genp"), "svce": .string("s"), "acct": .data(bytes("alice"))])
        }
    }
}
