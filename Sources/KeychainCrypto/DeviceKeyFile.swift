#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// The device key DK: 32 random bytes in `device.key` (mode 0600) in the state directory,
/// created on first start. It never leaves this file and guarded memory.
public enum DeviceKeyFile {
    public static let fileName = "device.key"

    /// Loads the key at `path`, creating it first if there is none. A file that others can
    /// read, or of the wrong size, is refused rather than used or replaced.
    public static func loadOrCreate(path: String) throws(KeychainError) -> SecureKey {
        if let key = try load(path: path) { return key }
        try create(path: path)
        guard let key = try load(path: path) else {
            throw KeychainError(.io, "\(path) vanished right after it was created")
        }
        return key
    }

    /// Loads the key of an existing keychain: a missing file is an error, never a new key
    /// (one that could not open the keychain's keybag).
    public static func loadExisting(path: String) throws(KeychainError) -> SecureKey {
        guard let key = try load(path: path) else {
            throw KeychainError(.decode, "\(path) is missing: the keychain's items cannot be decrypted without it; restore it from a backup")
        }
        return key
    }

    static func load(path: String) throws(KeychainError) -> SecureKey? {
        let fd: Int32
        do {
            fd = try SystemCall.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        } catch {
            if error.errno == ENOENT { return nil }
            throw error.keychainError("cannot open \(path)")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw KeychainError(.io, "cannot stat \(path)") }
        guard st.st_mode & 0o077 == 0 else {
            throw KeychainError(.notAvailable, "\(path) is readable by other users (mode \(String(st.st_mode & 0o777, radix: 8))); run chmod 600 on it")
        }
        guard st.st_size == SecureKey.byteCount else {
            throw KeychainError(.decode, "\(path) is \(st.st_size) bytes, not \(SecureKey.byteCount): it is not a device key")
        }
        var bytes = [UInt8](repeating: 0, count: SecureKey.byteCount)
        let read = bytes.withUnsafeMutableBytes { b in Result { () throws(SystemCallError) in try SystemCall.readFully(fd, into: b) } }
        switch read {
        case .success(SecureKey.byteCount):
            return SecureKey.taking(&bytes)
        case .success:
            Sodium.wipe(&bytes)
            throw KeychainError(.io, "short read from \(path): it shrank while being read")
        case .failure(let error):
            Sodium.wipe(&bytes)
            throw error.keychainError("cannot read \(path)")
        }
    }

    /// Writes a new key durably, linked into place only if there is none yet (so two starts
    /// racing cannot overwrite each other's key).
    static func create(path: String) throws(KeychainError) {
        var bytes = Sodium.randomBytes(SecureKey.byteCount)
        defer { Sodium.wipe(&bytes) }
        let written = bytes.withUnsafeBytes { b in
            Result { () throws(SystemCallError) in try DurableFile.write(b, to: path, placement: .createIfAbsent) }
        }
        if case .failure(let error) = written { throw error.keychainError("cannot create \(path) (\(error.call))") }
    }
}
