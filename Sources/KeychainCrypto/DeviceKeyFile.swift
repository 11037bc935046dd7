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

    /// Loads the key systemd placed in the service's credentials directory. systemd makes that
    /// file read-only and, for a service running as another user, owned by root with an ACL
    /// that lets the service's user read it, which stat shows as group-readable (the ACL's
    /// mask): so the check here is that no one may write it and others may not read it, the
    /// rest being the credentials directory's (only systemd sets $CREDENTIALS_DIRECTORY).
    public static func loadCredential(path: String) throws(KeychainError) -> SecureKey {
        guard let key = try load(path: path, check: checkCredential) else {
            throw KeychainError(.decode, "the device key credential \(path) is missing")
        }
        return key
    }

    static func checkCredential(_ path: String, _ st: stat) throws(KeychainError) {
        guard st.st_mode & S_IFMT == S_IFREG else {
            throw KeychainError(.notAvailable, "the device key credential \(path) is not a regular file")
        }
        guard st.st_uid == 0 || st.st_uid == geteuid() else {
            throw KeychainError(.notAvailable, "the device key credential \(path) belongs to uid \(st.st_uid), neither root nor keychaind's uid \(geteuid())")
        }
        guard st.st_mode & 0o022 == 0, st.st_mode & 0o007 == 0 else {
            throw KeychainError(.notAvailable, "the device key credential \(path) is writable by others or readable by anyone (mode \(String(st.st_mode & 0o777, radix: 8))); systemd writes credentials read-only for the service alone")
        }
    }

    /// The plain file: ours alone (0600 or 0400).
    static func checkPlainFile(_ path: String, _ st: stat) throws(KeychainError) {
        guard st.st_mode & 0o077 == 0 else {
            throw KeychainError(.notAvailable, "\(path) is readable by other users (mode \(String(st.st_mode & 0o777, radix: 8))); run chmod 600 on it")
        }
    }

    static func load(path: String, check: (String, stat) throws(KeychainError) -> Void = checkPlainFile) throws(KeychainError) -> SecureKey? {
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
        try check(path, st)
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
