#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// The state directory holds the device key and the database, so whoever can change it, a
/// file in it or a directory above it owns the keychain: they could read every item stored
/// later, or delete the device key. The store starts only in a directory that the daemon's
/// uid alone can change, reached through directories that only it and root can change.
enum StateDirectory {
    /// Creates the directory (0700, and any missing parents, 0700) and checks it, its parents
    /// and everything in it; tightens it to 0700 if others may read it. Throws
    /// errSecNotAvailable, naming the path and what to do, rather than adopt a directory
    /// another user controls. Returns its real path (links above it resolved: SQLite opens
    /// the database refusing any link on the way).
    static func prepare(_ path: String, uid: uid_t = geteuid()) throws(KeychainError) -> String {
        let trust = Trust(uid: uid)
        let absolute = try Self.absolute(path)
        let parts = absolute.split(separator: "/").map(String.init)
        guard !parts.isEmpty else { throw KeychainError(.notAvailable, "/ cannot be the state directory") }
        try trust.checkParent("/", of: absolute)
        var current = ""
        for part in parts.dropLast() {
            current += "/" + part
            try makeIfMissing(current)
            try trust.checkParent(current, of: absolute)
        }
        try makeIfMissing(absolute)
        try checkDirectoryAndEntries(absolute, trust: trust)
        guard let resolved = realpath(absolute, nil) else {
            throw SystemCallError.current("realpath").keychainError("cannot resolve \(absolute)")
        }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Creates `path` empty with mode 0600 if it does not exist, so that SQLite (which gives
    /// its -wal and -shm files the database file's mode) never makes a world-readable file.
    static func createPrivateFile(_ path: String) throws(KeychainError) {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw SystemCallError.current("open").keychainError("cannot create \(path)") }
        var st = stat()
        if fstat(fd, &st) == 0, st.st_mode & 0o077 != 0 { fchmod(fd, 0o600) }
        close(fd)
    }

    private static func absolute(_ path: String) throws(KeychainError) -> String {
        if path.hasPrefix("/") { return path }
        guard let cwd = getcwd(nil, 0) else {
            throw SystemCallError.current("getcwd").keychainError("cannot resolve \(path)")
        }
        defer { free(cwd) }
        return String(cString: cwd) + "/" + path
    }

    private static func makeIfMissing(_ path: String) throws(KeychainError) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw SystemCallError.current("mkdir").keychainError("cannot create \(path)")
        }
    }

    /// The directory itself is opened without following a link, so what is checked is what
    /// the store then uses; its entries are examined through that descriptor.
    private static func checkDirectoryAndEntries(_ path: String, trust: Trust) throws(KeychainError) {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            let failure = SystemCallError.current("open")  // before lstat overwrites errno
            var st = stat()
            if lstat(path, &st) == 0 { try trust.checkStateDirectory(path, st) }
            throw failure.keychainError("cannot open \(path)")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw KeychainError(.io, "cannot stat \(path)") }
        try trust.checkStateDirectory(path, st)
        // Others may read but not write: nothing was replaced, so closing it is enough.
        if st.st_mode & 0o077 != 0 { fchmod(fd, 0o700) }

        let listing = dup(fd)
        guard listing >= 0, let dir = fdopendir(listing) else {
            let failure = SystemCallError.current(listing < 0 ? "dup" : "fdopendir")
            if listing >= 0 { close(listing) }
            throw failure.keychainError("cannot list \(path)")
        }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(cString: $0.bindMemory(to: CChar.self).baseAddress!) }
            if name == "." || name == ".." { continue }
            var est = stat()
            guard fstatat(fd, name, &est, AT_SYMLINK_NOFOLLOW) == 0 else {
                if errno == ENOENT { continue }  // removed meanwhile (by us: only we can)
                throw SystemCallError.current("fstatat").keychainError("cannot stat \(path)/\(name)")
            }
            try trust.checkEntry(path + "/" + name, est, in: path)
        }
    }
}

/// Who may change a file, judged from its lstat: the rules behind the state directory's checks.
struct Trust {
    let uid: uid_t
    /// Inside a user namespace that does not map root (systemd's PrivateUsers=, which a
    /// user's service manager implies for its sandboxing), every file of a uid outside the
    /// namespace, root's included, shows as the overflow uid: its true owner cannot be seen
    /// from inside, and the service manager arranged those parents before entering it. Such
    /// a parent is accepted (docs/security.md, "Whose state directory"); nil elsewhere.
    let unmappedOwner: uid_t?

    init(uid: uid_t, unmappedOwner: uid_t? = Trust.overflowUIDIfRootIsUnmapped()) {
        self.uid = uid
        self.unmappedOwner = unmappedOwner
    }

    /// The overflow uid when this process's user namespace maps no uid to root.
    static func overflowUIDIfRootIsUnmapped() -> uid_t? {
        guard let map = readSmallFile("/proc/self/uid_map"), !mapsRoot(uidMap: map) else { return nil }
        guard let text = readSmallFile("/proc/sys/kernel/overflowuid"),
              let overflow = uid_t(text.split(separator: "\n").first ?? "") else { return 65534 }
        return overflow
    }

    /// Whether a /proc/PID/uid_map ("inside outside count" per line) covers uid 0 inside.
    static func mapsRoot(uidMap: String) -> Bool {
        for line in uidMap.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true).compactMap { UInt64($0) }
            if fields.count == 3 && fields[0] == 0 && fields[2] > 0 { return true }
        }
        return false
    }

    private static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { (raw) -> Int in (try? SystemCall.readFully(fd, into: raw)) ?? -1 }
        guard n >= 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }

    private static let groupOrOtherWrite: mode_t = 0o022
    private static let sticky: mode_t = 0o1000

    /// A directory above the state directory: its owner, or anyone who may write to it, could
    /// rename the state directory away and put another in its place. Root's and ours only,
    /// writable by others only with the sticky bit (as /tmp), which stops them renaming what
    /// is not theirs. A link is judged, then the directory it leads to, and that one's parents.
    func checkParent(_ path: String, of stateDirectory: String) throws(KeychainError) {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            throw SystemCallError.current("lstat").keychainError("cannot stat \(path)")
        }
        try checkParent(path, st, of: stateDirectory)
        guard Self.type(st) == S_IFLNK else { return }
        guard let resolved = realpath(path, nil) else {
            throw SystemCallError.current("realpath").keychainError("cannot resolve \(path)")
        }
        let target = String(cString: resolved)
        free(resolved)
        var current = ""
        for part in [""] + target.split(separator: "/").map(String.init) {
            current = part.isEmpty ? "/" : (current == "/" ? "" : current) + "/" + part
            var tst = stat()
            guard lstat(current, &tst) == 0 else {
                throw SystemCallError.current("lstat").keychainError("cannot stat \(current)")
            }
            try checkParent(current, tst, of: stateDirectory)
        }
    }

    private func checkParent(_ path: String, _ st: stat, of stateDirectory: String) throws(KeychainError) {
        let type = Self.type(st)
        guard type == S_IFDIR || type == S_IFLNK else {
            throw KeychainError(.notAvailable, "\(path), above the state directory \(stateDirectory), is not a directory")
        }
        guard st.st_uid == 0 || st.st_uid == uid || st.st_uid == unmappedOwner else {
            throw KeychainError(.notAvailable, "\(path), a parent of the state directory \(stateDirectory), belongs to \(Self.describe(st.st_uid)); it must be root's or \(Self.describe(uid))'s (keychaind's), or its owner could move the state directory away and put another in its place. Choose a state directory whose parents only root and \(Self.describe(uid)) can change.")
        }
        guard type == S_IFLNK || st.st_mode & Self.groupOrOtherWrite == 0 || st.st_mode & Self.sticky != 0 else {
            throw KeychainError(.notAvailable, "\(path), a parent of the state directory \(stateDirectory), is writable by its group or others without the sticky bit (mode \(Self.octal(st.st_mode))), so they could move the state directory away and put another in its place. Run chmod go-w \(path), or choose another state directory.")
        }
    }

    /// The state directory: ours, a real directory, and writable by nobody else. (Readable by
    /// others is tightened by the caller, not refused.)
    func checkStateDirectory(_ path: String, _ st: stat) throws(KeychainError) {
        if Self.type(st) == S_IFLNK {
            throw KeychainError(.notAvailable, "the state directory \(path) is a symbolic link; keychaind does not follow links there (the link's target could change under it). Give it the real directory instead.")
        }
        guard Self.type(st) == S_IFDIR else {
            throw KeychainError(.notAvailable, "the state directory \(path) is not a directory")
        }
        try checkOwner(path, st, stateDirectory: path)
        guard st.st_mode & Self.groupOrOtherWrite == 0 else {
            throw KeychainError(.notAvailable, "the state directory \(path) is writable by its group or others (mode \(Self.octal(st.st_mode))): they could replace the device key or the database. If nobody did, run chmod 700 \(path); if you are not sure, move it aside and start keychaind again to make a new keychain.")
        }
    }

    /// Anything in the state directory, known or not: a file or directory of ours that nobody
    /// else may write, never a link (one could lead to another user's file, and whether SQLite
    /// follows a link to its log or journal is not something to rely on).
    func checkEntry(_ path: String, _ st: stat, in stateDirectory: String) throws(KeychainError) {
        let type = Self.type(st)
        if type == S_IFLNK {
            throw KeychainError(.notAvailable, "\(path) is a symbolic link; keychaind does not follow links in its state directory (one could lead to another user's file). Replace it with the file itself, or remove it if it is not yours.")
        }
        guard type == S_IFREG || type == S_IFDIR else {
            throw KeychainError(.notAvailable, "\(path) is neither a file nor a directory; remove it from the state directory")
        }
        try checkOwner(path, st, stateDirectory: stateDirectory)
        guard st.st_mode & Self.groupOrOtherWrite == 0 else {
            throw KeychainError(.notAvailable, "\(path) is writable by its group or others (mode \(Self.octal(st.st_mode))): they could replace it. If nobody did, run chmod go-w \(path); if you are not sure, move the state directory aside and start keychaind again to make a new keychain.")
        }
    }

    private func checkOwner(_ path: String, _ st: stat, stateDirectory: String) throws(KeychainError) {
        guard st.st_uid == uid else {
            throw KeychainError(.notAvailable, "\(path) belongs to \(Self.describe(st.st_uid)), not to \(Self.describe(uid)) that keychaind runs as: whoever owns it could read every item stored from now on, or destroy the keychain. If it is your own keychain restored or copied as another user, run chown -R \(uid) \(stateDirectory); otherwise move the state directory aside and start keychaind again to make a new keychain.")
        }
    }

    private static func type(_ st: stat) -> mode_t { st.st_mode & S_IFMT }

    private static func octal(_ mode: mode_t) -> String { "0" + String(mode & 0o7777, radix: 8) }

    /// "uid 1001 (alice)", or "uid 1001" when it has no name.
    static func describe(_ uid: uid_t) -> String { UserAccount.describe(uid) }
}
