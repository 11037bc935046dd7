import Foundation
import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore
import KeychainSync
import Testing

/// A device for these tests: a keychain in a temporary state directory (no passcode, so CK[ck]
/// is loaded) and its own connection to the test's cluster.
final class TestDevice {
    let directory: String
    var store: ItemStore!
    let database: SyncDatabase

    init(_ cluster: TestCluster) throws {
        var template = Array("/tmp/kcsync.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp failed") }
        directory = String(cString: p)
        store = try ItemStore(configuration: StoreConfiguration(stateDirectory: directory, argon2: .testingOnly))
        database = SyncDatabase(try PostgresConnection(cluster.url))
    }

    deinit {
        store = nil
        try? FileManager.default.removeItem(atPath: directory)
    }

    func create(_ name: String = "first") throws -> (circle: SyncFingerprint, device: SyncFingerprint) {
        try SyncMembership.create(name: name, store: store, database: database)
    }

    func join(_ circle: SyncFingerprint, name: String = "second") throws -> SyncFingerprint {
        try SyncMembership.join(circle: circle, name: name, store: store, database: database)
    }

    func approve(_ device: SyncFingerprint) throws {
        try SyncMembership.approve(device: device, store: store, database: database)
    }

    func refresh() throws -> SyncRefreshOutcome { try SyncMembership.refresh(store: store, database: database) }
    func status() throws -> SyncStatusReport { try SyncMembership.status(store: store) }

    func count(_ table: String) throws -> Int64 {
        try database.connection.query("SELECT count(*)::int8 FROM \(table)").rows.first?.first?.int ?? -1
    }
}

/// One digit of `fingerprint` changed: a look-alike a person might mistype.
func oneDigitOff(_ fingerprint: SyncFingerprint) throws -> SyncFingerprint {
    var digits = Array(fingerprint.digits.utf8)
    digits[31] = digits[31] == UInt8(ascii: "9") ? UInt8(ascii: "0") : digits[31] + 1
    return try SyncFingerprint(typed: String(decoding: digits, as: UTF8.self))
}

@Suite("Sync membership: create, join, approve, refresh against PostgreSQL")
struct SyncMembershipTests {
    @Test func aFounderIsTheOnlyMemberAtEpochOneAndHoldsTheKey() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster)
        let made = try a.create()
        let status = try a.status()
        #expect(status.state == "member")
        #expect(status.circleFingerprint == made.circle)
        #expect(status.deviceFingerprint == made.device)
        #expect(status.epoch == 1 && status.members == 1)
        #expect(try LocalCircle(a.store.replica).circleKey(epoch: 1) != nil)
        #expect(try LocalCircle(a.store.replica).identity()?.keys.fingerprint == made.device)
        #expect(try a.count("sync_roster") == 1)
    }

    @Test func aJoinedDeviceApprovedByAMemberBecomesAMemberWithTheSameKey() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let made = try a.create()
        let bPrint = try b.join(made.circle)
        #expect(try b.status().state == "pending")
        #expect(try LocalCircle(b.store.replica).circleKey(epoch: 1) == nil)
        #expect(try b.refresh() == .verified)

        try a.approve(bPrint)
        #expect(try b.refresh() == .becameMember)
        let status = try b.status()
        #expect(status.state == "member")
        #expect(status.circleFingerprint == made.circle)
        #expect(status.epoch == 1 && status.members == 2)
        // The same circle key: both name one item with one record id.
        let item: AttributeDictionary = ["svce": .string("s"), "acct": .string("a"), "agrp": .string("g"), "sync": .int(1)]
        let aID = try #require(try LocalCircle(a.store.replica).circleKey(epoch: 1)).recordID(of: .genericPassword, attributes: item)
        let bID = try #require(try LocalCircle(b.store.replica).circleKey(epoch: 1)).recordID(of: .genericPassword, attributes: item)
        #expect(aID == bID)
        // A sees the new member too.
        #expect(try a.status().members == 2)
    }

    @Test func approvingWithOneDigitWrongIsItemNotFoundAndAddsNothing() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let bPrint = try b.join(try a.create().circle)
        expectError(.itemNotFound) { try a.approve(try oneDigitOff(bPrint)) }
        #expect(try a.count("sync_roster") == 1)
        #expect(try a.count("sync_wrapped_keys") == 0)
        #expect(try b.refresh() == .verified)
        #expect(try b.status().state == "pending")
    }

    @Test func joiningWithOneCircleDigitWrongWritesNothingAnywhere() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let made = try a.create()
        expectError(.itemNotFound) { _ = try b.join(try oneDigitOff(made.circle)) }
        #expect(try a.count("sync_devices") == 1)  // the founder's own
        #expect(try LocalCircle(b.store.replica).row() == nil)
        #expect(try LocalCircle(b.store.replica).deviceKeys() == nil)
    }

    @Test func aRosterRowEditedInPostgreSQLLeavesTheDeviceForkedAndAppliesNothing() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let made = try a.create()
        let bPrint = try b.join(made.circle)
        try a.approve(bPrint)
        // Flip a bit of entry 1's time (inside the signed bytes): XOR, so the byte always changes.
        try a.database.connection.query("""
            UPDATE sync_roster SET entry = set_byte(entry, 139, get_byte(entry, 139) # 1) WHERE entry_no = 1
            """)
        #expect(try a.refresh() != .verified)
        #expect(try a.status().state == "forked")
        // B never had entry 1: to it the edited entry does not verify, so it is not applied either.
        if case .forked = try b.refresh() {} else { Issue.record("B believed an edited roster entry") }
        #expect(try b.status().state == "forked")
        #expect(try LocalCircle(b.store.replica).circleKey(epoch: 1) == nil)
        #expect(try LocalCircle(b.store.replica).roster()?.length == 1)
    }

    @Test func aWrapAddressedToAnotherDeviceIsRefusedAndTheDeviceStaysPending() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster), c = try TestDevice(cluster)
        let circle = try a.create().circle
        let bPrint = try b.join(circle), cPrint = try c.join(circle)
        try a.approve(bPrint)
        try a.approve(cPrint)
        let bID = try #require(try LocalCircle(b.store.replica).deviceKeys()).id.bytes
        let cID = try #require(try LocalCircle(c.store.replica).deviceKeys()).id.bytes
        // The store hands B the wrap made for C.
        try a.database.connection.query("""
            UPDATE sync_wrapped_keys SET wrapped = c.wrapped, sig = c.sig
            FROM sync_wrapped_keys c WHERE sync_wrapped_keys.device_id = $1 AND c.device_id = $2
            """, [.bytea(bID), .bytea(cID)])
        expectError(.decode) { _ = try b.refresh() }
        #expect(try b.status().state == "pending")
        #expect(try LocalCircle(b.store.replica).circleKey(epoch: 1) == nil)
        #expect(try c.refresh() == .becameMember)
    }

    @Test func devicesListsMembersAndPendingDevicesByTheirNames() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster), c = try TestDevice(cluster)
        let made = try a.create("laptop")
        try a.approve(try b.join(made.circle, name: "desk"))
        let cPrint = try c.join(made.circle, name: "phone")
        let devices = try SyncMembership.devices(store: a.store, database: a.database)
        #expect(devices.map(\.name) == ["laptop", "desk", "phone"])
        #expect(devices.map(\.isMember) == [true, true, false])
        #expect(devices.last?.fingerprint == cPrint)
        #expect(devices.first?.fingerprint == made.device)
    }

    @Test func aSecondCreateOrAJoinWhileInACircleIsRefused() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster), b = try TestDevice(cluster)
        let circle = try b.create().circle
        _ = try a.create()
        expectError(.duplicateItem) { _ = try a.create() }
        expectError(.duplicateItem) { _ = try a.join(circle) }
    }

    @Test func aNameLongerThan64BytesIsRefusedBeforeAnythingIsWritten() throws {
        let cluster = try TestCluster()
        let a = try TestDevice(cluster)
        expectError(.param) { _ = try a.create(String(repeating: "n", count: 65)) }
        #expect(try LocalCircle(a.store.replica).row() == nil)
    }
}
