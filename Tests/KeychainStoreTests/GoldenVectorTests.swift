#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel
import KeychainStorage
import Testing
@testable import KeychainCrypto
@testable import KeychainStore
import StoreTestSupport

/// The persisted formats against fixed bytes in Tests/Vectors: a change that would leave
/// existing files unreadable fails here, where a round trip through the new code would pass.
/// Every version of a vector must go on decoding; the current writer must reproduce the
/// current version byte for byte (its random nonces, salts and item keys given).
@Suite("Golden vectors of the persisted formats")
struct GoldenVectorTests {
    static let sealedItems = VectorFile.all("sealed-item")
    static let keybags = VectorFile.all("keybag")
    static let backups = VectorFile.all("backup")
    static let deviceKeys = VectorFile.all("device-key")

    @Test func everyFormatHasAVectorOfItsCurrentVersion() {
        #expect(Self.sealedItems.last?.version == Int(ItemSealer.formatVersion))
        #expect(Self.keybags.last?.version == Int(KeybagRecord.currentVersion))
        #expect(Self.backups.last?.version == Int(BackupFile.formatVersion))
        #expect(Self.deviceKeys.last?.version == 1)
    }

    // MARK: device key file

    @Test(arguments: deviceKeys)
    func deviceKeyFileLoadsAsTheKeyItHolds(vector: VectorFile) throws {
        let key = try loadDeviceKey(vector)
        #expect(keyBytes(key) == (try vector.bytes("file")))
    }

    // MARK: keybag record

    @Test(arguments: keybags)
    func keybagRecordDecodesToItsPasscodeParameters(vector: VectorFile) throws {
        let record = try KeybagRecord(decoding: vector.bytes("record"))
        let passcode = try #require(record.passcode)
        #expect(passcode.salt == (try vector.bytes("salt")))
        #expect(passcode.argon2 == (try argon2(vector)))
        #expect(Set(record.wrappedKeys.keys) == Set(Protection.allCases))
    }

    @Test(arguments: keybags)
    func keybagOpensWithTheDeviceKeyAndUnlocksWithThePasscodeToTheClassKeys(vector: VectorFile) throws {
        let deviceKey = try loadDeviceKey(Self.deviceKeys.last!)
        #expect(keyBytes(deviceKey) == (try vector.bytes("device_key")))
        var bag = try Keybag(deviceKey: deviceKey, record: KeybagRecord(decoding: vector.bytes("record")))
        for pdmn in Protection.allCases where !pdmn.isPasscodeProtected {
            #expect(bag.key(for: pdmn).map(keyBytes) == (try vector.bytes("class_key_\(pdmn.rawValue)")))
        }
        try bag.unlock(passcode: Array(vector.text("passcode").utf8), deviceKey: deviceKey)
        for pdmn in Protection.allCases {
            #expect(bag.key(for: pdmn).map(keyBytes) == (try vector.bytes("class_key_\(pdmn.rawValue)")), "\(pdmn)")
        }
    }

    @Test func keybagRecordIsWrittenByteForByteAsTheCurrentVector() throws {
        let vector = try #require(Self.keybags.last)
        let deviceKey = key(try vector.bytes("device_key"))
        let params = KeybagRecord.PasscodeParameters(salt: try vector.bytes("salt"), argon2: try argon2(vector))
        let kek = try Keybag.kek(passcode: Array(vector.text("passcode").utf8), params: params, deviceKey: deviceKey)
        var wrapped: [Protection: [UInt8]] = [:]
        for pdmn in Protection.allCases {
            wrapped[pdmn] = Keybag.wrap(key(try vector.bytes("class_key_\(pdmn.rawValue)")), pdmn: pdmn,
                                        with: pdmn.isPasscodeProtected ? kek : Keybag.deviceWrapKey(deviceKey),
                                        passcodeWrapped: pdmn.isPasscodeProtected,
                                        nonce: try vector.bytes("nonce_\(pdmn.rawValue)"))
        }
        #expect(hex(KeybagRecord(passcode: params, wrappedKeys: wrapped).encoded()) == hex(try vector.bytes("record")))
    }

    // MARK: sealed item

    @Test(arguments: sealedItems)
    func sealedItemOpensToItsPlaintext(vector: VectorFile) throws {
        let plaintext = try ItemSealer.open(vector.bytes("blob"), identity: vector.bytes("identity"),
                                            classKey: key(vector.bytes("class_key")))
        #expect(plaintext == SecretBytes(try vector.bytes("plaintext")))
    }

    @Test(arguments: sealedItems)
    func sealedItemRowOpensToItsSecretAndAttributes(vector: VectorFile) throws {
        let codec = ItemCodec(hasher: LookupHasher(deviceKey: key(try vector.bytes("device_key"))))
        let row = try itemRow(vector, codec: codec)
        #expect(hex(codec.identity(of: row)) == hex(try vector.bytes("identity")))
        let item = try codec.open(row, classKey: key(vector.bytes("class_key")), withAttributes: true)
        #expect(item.data == SecretBytes(Array(try vector.text("secret").utf8)))
        #expect(item.attributes == (try attributes(vector)))
    }

    @Test func sealedItemIsWrittenByteForByteAsTheCurrentVector() throws {
        let vector = try #require(Self.sealedItems.last)
        let blob = ItemSealer.seal(try vector.bytes("plaintext"), identity: try vector.bytes("identity"),
                                   classKey: key(try vector.bytes("class_key")), itemKey: try vector.bytes("item_key"),
                                   keyNonce: try vector.bytes("key_nonce"), dataNonce: try vector.bytes("data_nonce"))
        #expect(hex(blob) == hex(try vector.bytes("blob")))
        // The plaintext is the secret, then the attributes, as the store writes them.
        var w = ByteWriter()
        w.lengthPrefixed(Array(try vector.text("secret").utf8))
        AttributeCodec.encode(try attributes(vector), into: &w)
        #expect(hex(w.bytes) == hex(try vector.bytes("plaintext")))
    }

    // MARK: backup file

    @Test(arguments: backups)
    func backupHeaderReadsWithoutThePassword(vector: VectorFile) throws {
        let file = try vector.bytes("file")
        let header = try BackupFile.header(of: file)
        #expect(header.itemCount == (try vector.number("items")))
        #expect(header.excludedCount == (try vector.number("excluded")))
        #expect(header.note == (try vector.text("note")))
        #expect(header.argon2 == (try argon2(vector)))
        #expect(header.salt == (try vector.bytes("salt")))
        #expect(Array(file.prefix(try vector.bytes("header").count)) == (try vector.bytes("header")))
    }

    @Test(arguments: backups)
    func backupOpensWithItsPasswordToItsPayloadAndItems(vector: VectorFile) throws {
        let (_, payload) = try BackupFile.open(vector.bytes("file"), password: Array(vector.text("password").utf8))
        #expect(payload == SecretBytes(try vector.bytes("payload")))
        let items = try BackupPayload.decode(payload)
        #expect(items.count == (try vector.number("items")))
        var expected = try attributes(vector)
        expected["class"] = .string(try vector.text("class"))
        expected["v_Data"] = .data(Array(try vector.text("secret").utf8))
        #expect(items.first == expected)
    }

    @Test func backupIsWrittenByteForByteAsTheCurrentVector() throws {
        let vector = try #require(Self.backups.last)
        var item = try attributes(vector)
        item["class"] = .string(try vector.text("class"))
        item["v_Data"] = .data(Array(try vector.text("secret").utf8))
        let payload = BackupPayload.encode([item])
        #expect(hex(Array(payload)) == hex(try vector.bytes("payload")))
        let file = try BackupFile.seal(payload: payload, itemCount: try vector.number("items"),
                                       excludedCount: try vector.number("excluded"), note: try vector.text("note"),
                                       password: Array(try vector.text("password").utf8), parameters: try argon2(vector),
                                       salt: try vector.bytes("salt"), nonce: try vector.bytes("nonce"))
        #expect(hex(file) == hex(try vector.bytes("file")))
    }

    // MARK: helpers

    private func key(_ raw: [UInt8]) -> SecureKey {
        var copy = raw
        return SecureKey.taking(&copy)
    }

    private func keyBytes(_ key: SecureKey) -> [UInt8] {
        key.withUnsafeBytes { Array($0) }
    }

    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    private func argon2(_ vector: VectorFile) throws -> Argon2Parameters {
        Argon2Parameters(opsLimit: UInt64(try vector.number("argon2_ops")), memLimitBytes: try vector.number("argon2_mem_bytes"))
    }

    /// The device key as the daemon loads it: from a 0600 file holding the vector's bytes.
    private func loadDeviceKey(_ vector: VectorFile) throws -> SecureKey {
        var template = Array("/tmp/kcvector.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp failed") }
        let directory = String(cString: p)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/" + DeviceKeyFile.fileName
        let contents = try vector.bytes("file")
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw KeychainError(.io, "cannot create \(path)") }
        _ = contents.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        return try DeviceKeyFile.loadExisting(path: path)
    }

    /// The item's attributes: `acct`, `svce`, `labl` (texts), `agrp`, `pdmn`, `sync`, `cdat`, `mdat`.
    private func attributes(_ vector: VectorFile) throws -> AttributeDictionary {
        [
            "acct": .string(try vector.text("acct")), "svce": .string(try vector.text("svce")),
            "labl": .string(try vector.text("labl")), "agrp": .string(try vector.text("agrp")),
            "pdmn": .string(try vector.text("pdmn")), "sync": .int(Int64(try vector.number("sync"))),
            "cdat": .date(Double(try vector.number("cdat"))), "mdat": .date(Double(try vector.number("mdat"))),
        ]
    }

    /// The database row of the vector's item: its plain columns and the lookup hashes of its
    /// texts under the vector's device key.
    private func itemRow(_ vector: VectorFile, codec: ItemCodec) throws -> ItemRow {
        let attributes = try attributes(vector)
        let cls = try #require(ItemClass(rawValue: try vector.text("class")))
        return ItemRow(itemClass: cls, persistentID: try vector.bytes("persistent_id"), accessGroup: try vector.text("agrp"),
                       protection: Protection(rawValue: try vector.text("pdmn")), sync: Int64(try vector.number("sync")),
                       created: Double(try vector.number("cdat")), modified: Double(try vector.number("mdat")),
                       hashes: codec.hashes(of: cls, attributes), blob: try vector.bytes("blob"))
    }
}
