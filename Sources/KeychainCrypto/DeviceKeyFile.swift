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
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw KeychainError(.io, "cannot open \(path): \(String(cString: strerror(errno)))")
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
        let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress!, $0.count) }
        guard n == SecureKey.byteCount else {
            Sodium.wipe(&bytes)
            throw KeychainError(.io, "short read from \(path)")
        }
        return SecureKey.taking(&bytes)
    }

    /// Writes a new key durably: temp file, fsync, link into place (so two starts racing
    /// cannot overwrite each other's key), fsync the directory.
    static func create(path: String) throws(KeychainError) {
        let tmp = path + ".tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw KeychainError(.io, "cannot create \(tmp): \(String(cString: strerror(errno)))") }
        var bytes = Sodium.randomBytes(SecureKey.byteCount)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
        Sodium.wipe(&bytes)
        let synced = fsync(fd) == 0
        close(fd)
        defer { unlink(tmp) }
        guard written == SecureKey.byteCount, synced else {
            throw KeychainError(.io, "cannot write \(tmp): \(String(cString: strerror(errno)))")
        }
        if link(tmp, path) != 0 && errno != EEXIST {
            throw KeychainError(.io, "cannot install \(path): \(String(cString: strerror(errno)))")
        }
        syncDirectory(of: path)
    }

    static func syncDirectory(of path: String) {
        let dir = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        let dfd = open(dir.isEmpty ? "." : dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 {
            fsync(dfd)
            close(dfd)
        }
    }
}
