import Foundation
import KeychainModel
import Testing
@testable import KeychainCrypto
@testable import KeychainStore
import StoreTestSupport

/// The negative vectors of Tests/Vectors/negative (README there): each case is a golden input
/// with one thing wrong, and the reader must refuse it with exactly the error the case names:
/// never a crash, never an answer. The Python reader (clients/python/tests/test_vectors.py)
/// must refuse the same cases.
@Suite("Negative vectors: inputs every reader must refuse")
struct NegativeVectorTests {
    static let cases: [NegativeCase] = VectorFile.negativeFiles.flatMap { name in
        let file = VectorFile(negative: name)
        return file.caseNames.map { NegativeCase(file: file, format: String(name.dropLast(4)), name: $0) }
    }

    @Test func everyFormatHasNegativeVectors() {
        #expect(Set(Self.cases.map(\.format)) == ["sealed-item", "keybag", "backup", "sync-identity", "sync-record", "sync-roster"])
        #expect(Self.cases.count >= 60)
    }

    @Test(arguments: cases)
    func theCaseIsRefusedWithItsError(_ c: NegativeCase) throws {
        let expected = try c.text("error")
        var refusal: String?
        do {
            switch c.format {
            case "sealed-item": try refuseSealedItem(c)
            case "keybag": try refuseKeybag(c)
            case "backup": try refuseBackup(c)
            case "sync-identity": try refuseSyncIdentity(c)
            case "sync-record": try refuseSyncRecord(c)
            case "sync-roster": refusal = try refuseSyncRoster(c)
            default: Issue.record("no reader for \(c.format)")
            }
        } catch let error as KeychainError {
            refusal = error.status.name
        }
        #expect(refusal == expected, "\(c)")
    }

    // MARK: a reader per format, as the daemon calls it

    private func refuseSealedItem(_ c: NegativeCase) throws {
        _ = try ItemSealer.open(c.bytes("blob"), identity: c.bytes("identity"), classKey: key(c.bytes("class_key")))
    }

    private func refuseKeybag(_ c: NegativeCase) throws {
        let deviceKey = key(try c.bytes("device_key"))
        var bag = try Keybag(deviceKey: deviceKey, record: KeybagRecord(decoding: c.bytes("record")))
        try bag.unlock(passcode: Array(c.text("passcode").utf8), deviceKey: deviceKey)
    }

    private func refuseBackup(_ c: NegativeCase) throws {
        let (_, payload) = try BackupFile.open(c.bytes("file"), password: Array(c.text("password").utf8))
        _ = try BackupPayload.decode(payload)
    }

    private func refuseSyncIdentity(_ c: NegativeCase) throws {
        _ = try SyncDeviceIdentity(opening: c.bytes("sealed"), id: SyncDeviceID(c.bytes("device_id")),
                                   classKey: key(c.bytes("class_key")))
    }

    private func refuseSyncRecord(_ c: NegativeCase) throws {
        let circleKey = SyncCircleKey(circleID: try SyncCircleID(c.bytes("circle_id")), epoch: UInt32(try c.number("epoch")),
                                      key: key(try c.bytes("cck")))
        let header = SyncRecordHeader(
            circleID: try SyncCircleID(c.bytes("circle_id")), recordID: try c.bytes("record_id"),
            epoch: UInt32(try c.has("row_epoch") ? c.number("row_epoch") : c.number("epoch")),
            version: SyncVersion(mdat: Int64(try c.number("version_mdat")), writer: try SyncDeviceID(c.bytes("writer")),
                                 counter: Int64(try c.number("counter"))),
            tombstone: try c.has("tombstone") && c.number("tombstone") == 1)
        _ = try SyncRecordSealer.open(header, body: c.bytes("body"), circleKey: circleKey)
    }

    /// The roster first; a wrap, head or join case then against the verified base roster.
    /// Answers "refused" for a join request whose signature does not verify (a Bool, not a throw).
    private func refuseSyncRoster(_ c: NegativeCase) throws -> String? {
        var entries: [SignedRosterEntry] = []
        while c.has("entry_\(entries.count)") {
            let n = entries.count
            entries.append(SignedRosterEntry(entry: try SyncRosterEntry(decoding: c.bytes("entry_\(n)")),
                                             signature: try c.bytes("sig_\(n)")))
        }
        let roster = try SyncRoster(verifying: entries)
        let a = try identity(c, "a_"), b = try identity(c, "b_")
        switch c.name.split(separator: "-").first {
        case "wrap":
            let wrapper = try c.has("wrapper_id") ? SyncDeviceID(c.bytes("wrapper_id")) : a.id
            let wrapped = SyncWrappedKey(circleID: roster.circleID, epoch: UInt32(try c.has("wrap_epoch") ? c.number("wrap_epoch") : 1),
                                         recipient: b.id, wrapper: wrapper, wrapped: try c.bytes("wrapped"),
                                         signature: try c.bytes("wrap_sig"))
            _ = try wrapped.unwrap(as: b, roster: roster)
        case "head":
            let head = SyncHead(circleID: roster.circleID, epoch: UInt32(try c.has("head_epoch") ? c.number("head_epoch") : 1),
                                device: try c.has("head_device") ? SyncDeviceID(c.bytes("head_device")) : a.id,
                                counter: Int64(try c.number("head_counter")),
                                rosterLength: UInt32(try c.has("head_roster_length") ? c.number("head_roster_length") : 2),
                                rosterHash: try c.has("head_roster_hash") ? c.bytes("head_roster_hash") : roster.hash,
                                signature: try c.bytes("head_sig"))
            _ = try head.verify(roster: roster)
        case "join":
            let request = SyncJoinRequest(circleID: roster.circleID, device: b.keys, name: try c.text("join_name"),
                                          signature: try c.bytes("join_sig"))
            if !request.isSigned(by: b.keys.fingerprint, for: roster.circleID) { return "refused" }
        default:
            break
        }
        return nil
    }

    private func identity(_ c: NegativeCase, _ prefix: String) throws -> SyncDeviceIdentity {
        SyncDeviceIdentity(signSeed: key(try c.bytes(prefix + "sign_seed")), agreementSecret: key(try c.bytes(prefix + "kx_secret")))
    }

    private func key(_ raw: [UInt8]) -> SecureKey {
        var copy = raw
        return SecureKey.taking(&copy)
    }
}

/// One case of a negative vector file: its own fields (`case.name`), then the file's shared
/// ones, then those of the golden vector the file's `base` names.
struct NegativeCase: CustomTestStringConvertible, Sendable {
    let file: VectorFile
    let format: String
    let name: String

    var testDescription: String { "\(format)/\(name)" }

    private var base: VectorFile {
        let baseName = (try? file.text("base")) ?? ""
        return VectorFile(name: baseName, version: 1)
    }

    private func source(_ key: String) -> (VectorFile, String) {
        if file.has("\(name).\(key)") { return (file, "\(name).\(key)") }
        if file.has(key) { return (file, key) }
        return (base, key)
    }

    func has(_ key: String) -> Bool { file.has("\(name).\(key)") || file.has(key) || base.has(key) }

    func bytes(_ key: String) throws -> [UInt8] {
        let (vector, field) = source(key)
        return try vector.bytes(field)
    }

    func text(_ key: String) throws -> String {
        let (vector, field) = source(key)
        return try vector.text(field)
    }

    func number(_ key: String) throws -> Int {
        let (vector, field) = source(key)
        return try vector.number(field)
    }
}
