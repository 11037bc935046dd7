#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel

/// Where the store keeps its files and how hard the passcode key is to guess.
public struct StoreConfiguration: Sendable {
    /// Holds device.key and keychain.db (mode 0700; files 0600).
    public var stateDirectory: String
    /// Argon2id cost for a passcode set or changed from now on (existing keybags keep the
    /// cost stored with them until the next change).
    public var argon2: Argon2Parameters

    public init(stateDirectory: String, argon2: Argon2Parameters = .standard) {
        self.stateDirectory = stateDirectory
        self.argon2 = argon2
    }

    public var databasePath: String { stateDirectory + "/keychain.db" }
    public var deviceKeyPath: String { stateDirectory + "/" + DeviceKeyFile.fileName }
}

/// The caller's access groups, in order: the first is where items added without agrp go.
/// An empty list is a caller with no access at all (errSecMissingEntitlement).
public struct AccessScope: Sendable, Equatable {
    public let groups: [String]

    public init(groups: [String]) { self.groups = groups }

    var defaultGroup: String? { groups.first }

    /// The groups a call may touch: the one it names (if the caller has it) or all of them.
    func groups(naming explicit: String?) throws(KeychainError) -> [String] {
        guard !groups.isEmpty else {
            throw KeychainError(.missingEntitlement, "the caller has no access groups")
        }
        guard let explicit else { return groups }
        guard groups.contains(explicit) else {
            throw KeychainError(.missingEntitlement, "access group \"\(explicit)\" is not one of the caller's groups")
        }
        return [explicit]
    }
}

/// The state directory: created 0700 if missing; tightened to 0700 if looser, since it holds
/// the device key and the database.
enum StateDirectory {
    static func prepare(_ path: String) throws(KeychainError) {
        var current = path.hasPrefix("/") ? "" : "."
        for part in path.split(separator: "/") {
            current += "/" + part
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                throw KeychainError(.io, "cannot create \(current): \(String(cString: strerror(errno)))")
            }
        }
        var st = stat()
        guard stat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR else {
            throw KeychainError(.io, "\(path) is not a directory")
        }
        if st.st_mode & 0o077 != 0 { chmod(path, 0o700) }
    }

    /// Creates `path` empty with mode 0600 if it does not exist, so that SQLite (which gives
    /// its -wal and -shm files the database file's mode) never makes a world-readable file.
    static func createPrivateFile(_ path: String) throws(KeychainError) {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw KeychainError(.io, "cannot create \(path): \(String(cString: strerror(errno)))") }
        var st = stat()
        if fstat(fd, &st) == 0, st.st_mode & 0o077 != 0 { fchmod(fd, 0o600) }
        close(fd)
    }
}

extension ItemStore {
    /// CFAbsoluteTime now: seconds since 2001-01-01 UTC.
    public static func absoluteTimeNow() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9 - absoluteTimeIntervalSince1970
    }
}
