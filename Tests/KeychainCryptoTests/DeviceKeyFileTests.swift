#if canImport(Glibc)
import Glibc
#endif
import Testing
import KeychainCrypto
import KeychainModel

@Suite struct DeviceKeyFileTests {
    let dir = TemporaryDirectory()
    var keyPath: String { dir.file(DeviceKeyFile.fileName) }

    private func load() -> KeychainStatus? {
        thrownStatus { () throws(KeychainError) in try DeviceKeyFile.loadOrCreate(path: keyPath) }
    }

    @Test func createsAThirtyTwoByteFileWithMode0600() throws {
        defer { dir.cleanup() }
        let key = try DeviceKeyFile.loadOrCreate(path: keyPath)
        let contents = try #require(dir.read(DeviceKeyFile.fileName))
        #expect(contents.count == 32)
        #expect(contents == bytes(of: key))
        #expect(dir.mode(DeviceKeyFile.fileName) == 0o600)
    }

    @Test func fileIsNamedDeviceKey() {
        defer { dir.cleanup() }
        #expect(DeviceKeyFile.fileName == "device.key")
    }

    @Test func createdKeyIsNotAllZero() throws {
        defer { dir.cleanup() }
        #expect(try bytes(of: DeviceKeyFile.loadOrCreate(path: keyPath)).contains { $0 != 0 })
    }

    @Test func secondLoadReturnsTheSameKey() throws {
        defer { dir.cleanup() }
        let first = try DeviceKeyFile.loadOrCreate(path: keyPath)
        let second = try DeviceKeyFile.loadOrCreate(path: keyPath)
        #expect(bytes(of: first) == bytes(of: second))
    }

    @Test func keysInDifferentDirectoriesDiffer() throws {
        let other = TemporaryDirectory()
        defer { dir.cleanup(); other.cleanup() }
        let a = try DeviceKeyFile.loadOrCreate(path: keyPath)
        let b = try DeviceKeyFile.loadOrCreate(path: other.file(DeviceKeyFile.fileName))
        #expect(bytes(of: a) != bytes(of: b))
    }

    @Test func loadsAnExistingKeyFileAsIs() throws {
        defer { dir.cleanup() }
        let existing = (0..<32).map { UInt8($0 + 100) }
        dir.write(DeviceKeyFile.fileName, existing, mode: 0o600)
        #expect(try bytes(of: DeviceKeyFile.loadOrCreate(path: keyPath)) == existing)
    }

    @Test func leavesNoTemporaryFileBehind() throws {
        defer { dir.cleanup() }
        _ = try DeviceKeyFile.loadOrCreate(path: keyPath)
        #expect(dir.entries() == [DeviceKeyFile.fileName])
    }

    @Test func refusesAFileOthersCanRead() {
        defer { dir.cleanup() }
        let original = [UInt8](repeating: 7, count: 32)
        dir.write(DeviceKeyFile.fileName, original, mode: 0o644)
        #expect(load() == .notAvailable)
        #expect(dir.read(DeviceKeyFile.fileName) == original, "the refused file must not be replaced")
        #expect(dir.mode(DeviceKeyFile.fileName) == 0o644)
    }

    @Test(arguments: [mode_t(0o640), 0o604, 0o610, 0o601])
    func refusesAnyGroupOrOtherPermission(mode: mode_t) {
        defer { dir.cleanup() }
        dir.write(DeviceKeyFile.fileName, [UInt8](repeating: 7, count: 32), mode: mode)
        #expect(load() == .notAvailable)
    }

    @Test func acceptsAnOwnerReadOnlyFile() throws {
        defer { dir.cleanup() }
        dir.write(DeviceKeyFile.fileName, [UInt8](repeating: 7, count: 32), mode: 0o400)
        #expect(try bytes(of: DeviceKeyFile.loadOrCreate(path: keyPath)) == [UInt8](repeating: 7, count: 32))
    }

    @Test(arguments: [0, 31, 33, 64])
    func refusesAFileOfTheWrongSize(size: Int) {
        defer { dir.cleanup() }
        let original = [UInt8](repeating: 7, count: size)
        dir.write(DeviceKeyFile.fileName, original, mode: 0o600)
        #expect(load() == .decode)
        #expect(dir.read(DeviceKeyFile.fileName) == original, "the refused file must not be replaced")
    }

    @Test func refusesASymbolicLink() {
        defer { dir.cleanup() }
        dir.write("real.key", [UInt8](repeating: 7, count: 32), mode: 0o600)
        symlink(dir.file("real.key"), keyPath)
        #expect(load() != nil)
    }

    @Test func missingDirectoryIsAnIOError() {
        defer { dir.cleanup() }
        #expect(thrownStatus { () throws(KeychainError) in
            try DeviceKeyFile.loadOrCreate(path: dir.file("absent/device.key"))
        } == .io)
    }

    // A systemd credential: read-only, and for a service running as another user root's with
    // an ACL letting that user read it, which stat shows as mode 0440 (the ACL's mask).
    @Test(arguments: [mode_t(0o400), 0o440])
    func acceptsACredentialAsSystemdWritesIt(mode: mode_t) throws {
        defer { dir.cleanup() }
        dir.write(DeviceKeyFile.fileName, [UInt8](repeating: 9, count: 32), mode: mode)
        #expect(try bytes(of: DeviceKeyFile.loadCredential(path: keyPath)) == [UInt8](repeating: 9, count: 32))
    }

    @Test(arguments: [mode_t(0o444), 0o404, 0o460, 0o402])
    func refusesACredentialOthersMayReadOrAnyoneElseWrite(mode: mode_t) {
        defer { dir.cleanup() }
        dir.write(DeviceKeyFile.fileName, [UInt8](repeating: 9, count: 32), mode: mode)
        #expect(thrownStatus { () throws(KeychainError) in _ = try DeviceKeyFile.loadCredential(path: keyPath) } == .notAvailable)
    }

    @Test func aCredentialOfTheWrongSizeIsRefused() {
        defer { dir.cleanup() }
        dir.write(DeviceKeyFile.fileName, [UInt8](repeating: 9, count: 31), mode: 0o400)
        #expect(thrownStatus { () throws(KeychainError) in _ = try DeviceKeyFile.loadCredential(path: keyPath) } == .decode)
    }

    @Test func aMissingCredentialIsNeverCreated() {
        defer { dir.cleanup() }
        #expect(thrownStatus { () throws(KeychainError) in _ = try DeviceKeyFile.loadCredential(path: keyPath) } == .decode)
        #expect(dir.entries().isEmpty)
    }
}
