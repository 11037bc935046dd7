import Foundation
import KeychainModel
import Testing
@testable import KeychainCrypto
import StoreTestSupport

/// The sync formats (docs/sync.md, sections 2-6) against fixed bytes in Tests/Vectors: what one
/// version of keychaind writes to PostgreSQL, another must read, so these bytes never change
/// for a version. Every version must go on opening; the writer must reproduce the newest.
@Suite("Golden vectors of the sync formats")
struct SyncGoldenVectorTests {
    static let identities = VectorFile.all("sync-identity")
    static let records = VectorFile.all("sync-record")
    static let rosters = VectorFile.all("sync-roster")

    @Test func everySyncFormatHasAVectorOfItsCurrentVersion() {
        #expect(Self.identities.last?.version == 1)
        #expect(Self.records.last?.version == Int(SyncRecordSealer.formatVersion))
        #expect(Self.rosters.last?.version == 1)
    }

    // MARK: device identity

    @Test(arguments: identities)
    func theIdentityGivesItsPublicKeysIdAndFingerprint(vector: VectorFile) throws {
        let identity = try deviceIdentity(vector, "")
        #expect(identity.keys.signPublicKey == (try vector.bytes("sign_pk")))
        #expect(identity.keys.agreementPublicKey == (try vector.bytes("kx_pk")))
        #expect(identity.id.bytes == (try vector.bytes("device_id")))
        #expect(identity.keys.fingerprint.description == (try vector.text("fingerprint")))
    }

    @Test(arguments: identities)
    func theLocallySealedIdentityOpens(vector: VectorFile) throws {
        let opened = try SyncDeviceIdentity(opening: vector.bytes("sealed"), id: SyncDeviceID(vector.bytes("device_id")),
                                            classKey: key(vector.bytes("class_key")))
        #expect(opened.keys.signPublicKey == (try vector.bytes("sign_pk")))
    }

    @Test func theIdentityIsSealedByteForByteAsTheCurrentVector() throws {
        let vector = try #require(Self.identities.last)
        let sealed = try deviceIdentity(vector, "").sealed(under: key(vector.bytes("class_key")), nonce: vector.bytes("nonce"))
        #expect(hex(sealed) == hex(try vector.bytes("sealed")))
    }

    // MARK: records

    @Test(arguments: records)
    func theRecordIDIsTheKeyedHashOfClassAndPrimaryKey(vector: VectorFile) throws {
        let circleKey = try self.circleKey(vector)
        #expect(keyBytes(circleKey.recordSealKey) == (try vector.bytes("rsk")))
        #expect(keyBytes(circleKey.recordIDKey) == (try vector.bytes("rik")))
        #expect(try circleKey.recordID(of: .genericPassword, attributes: attributes(vector)) == (try vector.bytes("record_id")))
    }

    @Test(arguments: records)
    func theRecordAndItsTombstoneOpen(vector: VectorFile) throws {
        let circleKey = try self.circleKey(vector)
        let item = try SyncRecordSealer.open(header(vector, tombstone: false), body: vector.bytes("body"), circleKey: circleKey)
        #expect(item == .item(.genericPassword, .afterFirstUnlock, try attributes(vector)))
        let tombstone = try SyncRecordSealer.open(header(vector, tombstone: true), body: vector.bytes("tombstone_body"), circleKey: circleKey)
        #expect(tombstone == .tombstone(.genericPassword))
    }

    @Test func theRecordIsSealedByteForByteAsTheCurrentVector() throws {
        let vector = try #require(Self.records.last)
        let circleKey = try self.circleKey(vector)
        let version = try header(vector, tombstone: false).version
        let (header, body) = try SyncRecordSealer.seal(.genericPassword, .afterFirstUnlock, attributes(vector), version: version,
                                                       circleKey: circleKey, nonce: vector.bytes("nonce"))
        #expect(hex(header.associatedData) == hex(try vector.bytes("aad")))
        #expect(hex(body) == hex(try vector.bytes("body")))
        let (_, tombstone) = SyncRecordSealer.sealTombstone(.genericPassword, recordID: header.recordID, version: version,
                                                            circleKey: circleKey, nonce: try vector.bytes("tombstone_nonce"))
        #expect(hex(tombstone) == hex(try vector.bytes("tombstone_body")))
        let local = circleKey.sealed(under: key(try vector.bytes("class_key")), nonce: try vector.bytes("local_nonce"))
        #expect(hex(local) == hex(try vector.bytes("local_sealed")))
    }

    // MARK: roster, key wrap, head

    @Test(arguments: rosters)
    func theRosterVerifiesToItsMembersAndCircleFingerprint(vector: VectorFile) throws {
        let roster = try SyncRoster(verifying: rosterEntries(vector))
        #expect(roster.members.count == 2)
        #expect(roster.circleFingerprint.description == (try vector.text("circle_fingerprint")))
        #expect(roster.hash == (try vector.bytes("roster_hash")))
    }

    @Test(arguments: rosters)
    func theWrappedKeyOpensForTheApprovedDeviceAndTheHeadVerifies(vector: VectorFile) throws {
        let roster = try SyncRoster(verifying: rosterEntries(vector))
        let a = try deviceIdentity(vector, "a_"), b = try deviceIdentity(vector, "b_")
        let wrapped = SyncWrappedKey(circleID: roster.circleID, epoch: 1, recipient: b.id, wrapper: a.id,
                                     wrapped: try vector.bytes("wrapped"), signature: try vector.bytes("wrap_sig"))
        #expect(keyBytes(try wrapped.unwrap(as: b, roster: roster).key) == (try vector.bytes("cck")))
        let head = SyncHead(circleID: roster.circleID, epoch: 1, device: a.id, counter: Int64(try vector.number("head_counter")),
                            rosterLength: 2, rosterHash: roster.hash, signature: try vector.bytes("head_sig"))
        #expect(try head.verify(roster: roster).counter == Int64(try vector.number("head_counter")))
    }

    @Test(arguments: rosters)
    func theJoinRequestIsTheDevicesWhoseFingerprintIsTyped(vector: VectorFile) throws {
        let b = try deviceIdentity(vector, "b_")
        let circleID = try SyncCircleID(vector.bytes("circle_id"))
        let request = SyncJoinRequest(circleID: circleID, device: b.keys, name: try vector.text("join_name"),
                                      signature: try vector.bytes("join_sig"))
        #expect(request.isSigned(by: b.keys.fingerprint, for: circleID))
    }

    @Test func theRosterWrapAndHeadAreWrittenByteForByteAsTheCurrentVector() throws {
        let vector = try #require(Self.rosters.last)
        let a = try deviceIdentity(vector, "a_"), b = try deviceIdentity(vector, "b_")
        let circleID = try SyncCircleID(vector.bytes("circle_id"))
        var roster = SyncRoster.found(circleID: circleID, by: a, time: Int64(try vector.number("time_0")))
        try roster.append(roster.signing(.add, subject: b.keys, by: a, time: Int64(try vector.number("time_1"))))
        for (n, signed) in roster.entries.enumerated() {
            #expect(hex(signed.entry.encoded) == hex(try vector.bytes("entry_\(n)")))
            #expect(hex(signed.signature) == hex(try vector.bytes("sig_\(n)")))
        }
        let cck = SyncCircleKey(circleID: circleID, epoch: 1, key: key(try vector.bytes("cck")))
        let wrapped = try SyncWrappedKey.wrap(cck, to: b.keys, by: a, nonce: vector.bytes("wrap_nonce"))
        #expect(hex(wrapped.wrapped) == hex(try vector.bytes("wrapped")))
        #expect(hex(wrapped.signature) == hex(try vector.bytes("wrap_sig")))
        let head = SyncHead.signed(by: a, counter: Int64(try vector.number("head_counter")), roster: roster)
        #expect(hex(head.signature) == hex(try vector.bytes("head_sig")))
        let join = try SyncJoinRequest.signed(by: b, circleID: circleID, name: vector.text("join_name"))
        #expect(hex(join.signature) == hex(try vector.bytes("join_sig")))
    }

    // MARK: helpers

    private func deviceIdentity(_ vector: VectorFile, _ prefix: String) throws -> SyncDeviceIdentity {
        SyncDeviceIdentity(signSeed: key(try vector.bytes(prefix + "sign_seed")), agreementSecret: key(try vector.bytes(prefix + "kx_secret")))
    }

    private func circleKey(_ vector: VectorFile) throws -> SyncCircleKey {
        SyncCircleKey(circleID: try SyncCircleID(vector.bytes("circle_id")), epoch: UInt32(try vector.number("epoch")),
                      key: key(try vector.bytes("cck")))
    }

    private func header(_ vector: VectorFile, tombstone: Bool) throws -> SyncRecordHeader {
        SyncRecordHeader(circleID: try SyncCircleID(vector.bytes("circle_id")), recordID: try vector.bytes("record_id"),
                         epoch: UInt32(try vector.number("epoch")),
                         version: SyncVersion(mdat: Int64(try vector.number("version_mdat")),
                                              writer: try SyncDeviceID(vector.bytes("writer")),
                                              counter: Int64(try vector.number("counter"))),
                         tombstone: tombstone)
    }

    private func attributes(_ vector: VectorFile) throws -> AttributeDictionary {
        [
            "class": .string("genp"), "acct": .string(try vector.text("acct")), "svce": .string(try vector.text("svce")),
            "labl": .string(try vector.text("labl")), "agrp": .string(try vector.text("agrp")), "pdmn": .string("ck"),
            "sync": .int(1), "cdat": .date(Double(try vector.number("cdat"))), "mdat": .date(Double(try vector.number("mdat"))),
            "v_Data": .data(SecretBytes(Array(try vector.text("secret").utf8))),
        ]
    }

    private func rosterEntries(_ vector: VectorFile) throws -> [SignedRosterEntry] {
        try (0..<2).map { n in
            SignedRosterEntry(entry: try SyncRosterEntry(decoding: vector.bytes("entry_\(n)")), signature: try vector.bytes("sig_\(n)"))
        }
    }

    private func key(_ raw: [UInt8]) -> SecureKey {
        var copy = raw
        return SecureKey.taking(&copy)
    }

    private func keyBytes(_ key: SecureKey) -> [UInt8] { key.withUnsafeBytes { Array($0) } }

    private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined(separator: " ") }
}
