import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

@Suite("Every class round-trips")
struct RoundTripTests {
    @Test func genericPasswordSecretAndAttributesComeBack() throws {
        let t = try TemporaryStore()
        try t.add(genp("api.example.com", "alice", ["v_Data": .data(bytes("s3cret")), "labl": .string("API token"),
                                                    "desc": .string("token"), "gena": .data([1, 2, 3])]))
        #expect(try t.secret(genp("api.example.com", "alice")) == bytes("s3cret"))
        let attrs = try #require(try t.attributes(genp("api.example.com", "alice")))
        #expect(attrs["labl"] == .string("API token"))
        #expect(attrs["desc"] == .string("token"))
        #expect(attrs["gena"] == .data([1, 2, 3]))
        #expect(attrs["agrp"] == .string("com.example.app"))
        #expect(attrs["pdmn"] == .string("ak"))
        #expect(attrs["sync"] == .int(0))
        #expect(attrs["v_Data"] == nil)
    }

    @Test func internetPasswordRoundTripsWithAllKeyAttributes() throws {
        let t = try TemporaryStore()
        let item: AttributeDictionary = [
            "class": .string("inet"), "srvr": .string("git.example.com"), "acct": .string("bob"),
            "ptcl": .string("htps"), "port": .int(443), "path": .string("/repo.git"),
            "atyp": .string("dflt"), "sdmn": .string("realm"),
        ]
        var withData = item
        withData["v_Data"] = .data(bytes("ghp_token"))
        try t.add(withData)
        #expect(try t.secret(item) == bytes("ghp_token"))
        let attrs = try #require(try t.attributes(["class": .string("inet"), "srvr": .string("git.example.com")]))
        #expect(attrs["ptcl"] == .string("htps"))
        #expect(attrs["port"] == .int(443))
        #expect(attrs["path"] == .string("/repo.git"))
    }

    @Test func certificateDefaultsToAlwaysAndRoundTrips() throws {
        let t = try TemporaryStore()
        let der = TestCertificate.ed25519DER
        try t.add(["class": .string("cert"), "v_Data": .data(der)])
        let query: AttributeDictionary = ["class": .string("cert"), "slnr": .data([0x0b])]
        #expect(try t.secret(query) == der)
        let attrs = try #require(try t.attributes(query))
        #expect(attrs["pdmn"] == .string("dk"))
        #expect(attrs["pkhh"] == .data(TestCertificate.ed25519KeyID))
    }

    @Test func keyRoundTripsWithItsPrimaryKeyDefaults() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("keys"), "v_Data": .data(Array(repeating: 1, count: 32)), "kcls": .string("2"),
                   "atag": .string("com.example.key"), "type": .int(105), "bsiz": .int(256)])
        let query: AttributeDictionary = ["class": .string("keys"), "atag": .string("com.example.key")]
        #expect(try t.secret(query) == Array(repeating: 1, count: 32))
        let attrs = try #require(try t.attributes(query))
        #expect(attrs["kcls"] == .int(2))
        #expect(attrs["klbl"] == .data([]))
        #expect(attrs["edat"] == .date(0))
        #expect(attrs["pdmn"] == .string("ak"))
    }

    @Test func itemWithoutSecretReturnsEmptyData() throws {
        let t = try TemporaryStore()
        try t.add(genp("s", "a"))
        #expect(try t.secret(genp("s", "a")) == [])
    }

    @Test func secretOfExactlyTheLimitIsStored() throws {
        let t = try TemporaryStore()
        let big = [UInt8](repeating: 0x5A, count: KeychainLimits.maxSecretBytes)
        try t.add(genp("big", "a", ["v_Data": .data(big)]))
        #expect(try t.secret(genp("big", "a")) == big)
    }

    @Test func binarySecretWithNewlinesAndZerosIsKeptByteForByte() throws {
        let t = try TemporaryStore()
        let secret: [UInt8] = [0, 10, 13, 0xFF, 0, 0x0A]
        try t.add(genp("bin", "a", ["v_Data": .data(secret)]))
        #expect(try t.secret(genp("bin", "a")) == secret)
    }

    @Test func creationAndModificationDatesAreNowAsAbsoluteTime() throws {
        let t = try TemporaryStore()
        t.clock.now = 812_345_678.5
        try t.add(genp("s", "a", ["cdat": .date(1)]))  // a client's cdat is overwritten
        let attrs = try #require(try t.attributes(genp("s", "a")))
        #expect(attrs["cdat"] == .date(812_345_678.5))
        #expect(attrs["mdat"] == .date(812_345_678.5))
    }

    @Test func realClockDatesCountFrom2001() throws {
        let now = ItemStore.absoluteTimeNow()
        // 2025-01-01 is 757_382_400 s after 2001-01-01; 2040-01-01 is 1_230_768_000.
        #expect(now > 757_382_400 && now < 1_230_768_000)
    }

    @Test func identityIsCertificateJoinedWithItsPrivateKey() throws {
        let t = try TemporaryStore()
        let keyID = TestCertificate.p256KeyID
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER), "labl": .string("my identity")])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("PRIVATE")), "klbl": .data(keyID), "kcls": .int(1), "priv": .int(1)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("PUBLIC")), "klbl": .data(keyID), "kcls": .int(0)])
        let result = try t.copy(["class": .string("idnt"), "labl": .string("my identity"),
                                 "r_Attributes": .bool(true), "r_Data": .bool(true)])
        guard case .single(.attributes(let attrs)) = result else {
            Issue.record("expected one attributes dictionary, got \(result)")
            return
        }
        #expect(attrs["v_Data"] == .data(bytes("PRIVATE")))
        #expect(attrs["certdata"] == .data(TestCertificate.p256DER))
        #expect(attrs["labl"] == .string("my identity"))
        #expect(attrs["kcls"] == .int(1))
        #expect(try t.count(["class": .string("idnt")]) == 1)
    }

    @Test func certificateWithoutMatchingPrivateKeyIsNoIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.ed25519KeyID), "kcls": .int(1), "priv": .int(1)])
        expectStatus(.itemNotFound) { _ = try t.copy(["class": .string("idnt")]) }
    }

    @Test func deletingAnIdentityDeletesCertificateAndKey() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.p256KeyID), "kcls": .int(1), "priv": .int(1)])
        try t.store.items.delete(["class": .string("idnt")], scope: TemporaryStore.app)
        #expect(try t.store.itemCount() == 0)
    }

    @Test func identityPersistentRefFindsTheSameIdentity() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.p256KeyID), "kcls": .int(1), "priv": .int(1)])
        guard case .single(.persistentRef(let ref)) = try t.copy(["class": .string("idnt"), "r_PersistentRef": .bool(true)]) else {
            Issue.record("no persistent ref")
            return
        }
        #expect(ref.prefix(4) == ArraySlice(bytes("idnt")))
        #expect(try t.copy(["v_PersistentRef": .data(ref), "r_Data": .bool(true)]) == .single(.data(bytes("K"))))
    }

    @Test func updatingAnIdentityChangesCertificateAndKey() throws {
        let t = try TemporaryStore()
        try t.add(["class": .string("cert"), "v_Data": .data(TestCertificate.p256DER)])
        try t.add(["class": .string("keys"), "v_Data": .data(bytes("K")), "klbl": .data(TestCertificate.p256KeyID), "kcls": .int(1), "priv": .int(1)])
        try t.store.items.update(["class": .string("idnt")], changes: ["labl": .string("renamed"), "pdmn": .string("ck")],
                           scope: TemporaryStore.app)
        let cert = try #require(try t.attributes(["class": .string("cert")]))
        let key = try #require(try t.attributes(["class": .string("keys")]))
        #expect(cert["labl"] == .string("renamed"))
        #expect(cert["pdmn"] == .string("ck"))
        #expect(key["pdmn"] == .string("ck"))
        #expect(key["labl"] == nil)
    }

    @Test func addingAnIdentityDirectlyIsRefusedWithGuidance() throws {
        let t = try TemporaryStore()
        expectStatus(.param) { try t.add(["class": .string("idnt"), "v_Data": .data([1])]) }
    }
}
