#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol

/// The agent's listening socket: 0600, in a directory only its owner can enter. Given a
/// path, the agent creates its directory (0700) when missing and otherwise accepts only a
/// directory of its own uid that no one else may enter; at the path itself it replaces only
/// a stale socket of its own, never a symlink, another user's file or a live agent. Without a
/// path it makes a fresh directory under $TMPDIR (or /tmp), as `ssh-agent` does.
public struct AgentSocket: Sendable {
    public let listener: UnixSocket
    public let path: String
    /// The directory the agent created, removed again on a clean exit; nil when it existed.
    public let createdDirectory: String?

    public static func listen(at requested: String?) throws(KeychainError) -> AgentSocket {
        let (path, created) = if let requested { try prepare(requested) } else { try temporaryPath() }
        do {
            let listener = try UnixSocket.listen(path: path, mode: 0o600, backlog: 64)
            return AgentSocket(listener: listener, path: path, createdDirectory: created)
        } catch {
            if let created { rmdir(created) }
            throw KeychainError(.io, "cannot listen on \(path): \(error)")
        }
    }

    /// Removes the socket and the directory the agent made for it.
    public func remove() {
        unlink(path)
        if let createdDirectory { rmdir(createdDirectory) }
    }

    /// Characters a path may hold so that the `SSH_AUTH_SOCK=...;` line is safe to `eval`.
    static func isShellSafe(_ path: String) -> Bool {
        path.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "A") && c <= UInt8(ascii: "Z"))
                || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9")) || Array("/._-+@%,:=".utf8).contains(c)
        }
    }

    private static func temporaryPath() throws(KeychainError) -> (String, String?) {
        let base = DefaultPaths.env("TMPDIR") ?? "/tmp"
        var template = Array("\(base)/keychain-ssh-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw SystemCallError.current("mkdtemp").keychainError("create a directory for the agent socket under \(base)")
        }
        let directory = String(cString: made)
        let path = directory + "/agent.\(getpid())"
        guard isShellSafe(path), path.utf8.count < 108 else {
            rmdir(directory)
            throw KeychainError(.param, "TMPDIR gives an agent path that is too long or not safe to print for a shell: set TMPDIR or pass --listen")
        }
        return (path, directory)
    }

    private static func prepare(_ path: String) throws(KeychainError) -> (String, String?) {
        guard path.hasPrefix("/") else { throw KeychainError(.param, "--listen needs an absolute path") }
        guard isShellSafe(path) else {
            throw KeychainError(.param, "--listen path may hold only letters, digits and / . _ - + @ % , : = (it is printed for a shell to eval)")
        }
        guard path.utf8.count < 108 else { throw KeychainError(.param, "--listen path is over 107 bytes, the limit of a Unix socket path") }
        let directory = parent(of: path)
        var created: String?
        var st = stat()
        if lstat(directory, &st) != 0 {
            guard errno == ENOENT else { throw SystemCallError.current("lstat").keychainError("inspect \(directory)") }
            guard mkdir(directory, 0o700) == 0 else { throw SystemCallError.current("mkdir").keychainError("create \(directory)") }
            created = directory
            guard lstat(directory, &st) == 0 else { throw SystemCallError.current("lstat").keychainError("inspect \(directory)") }
        }
        guard st.st_mode & S_IFMT == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o077 == 0 else {
            throw KeychainError(.param, "\(directory) must be a directory of yours that no one else can enter (mode 0700, not a symlink); name a socket in a new directory and the agent creates it")
        }
        do {
            try removeStaleSocket(at: path)
        } catch {
            if let created { rmdir(created) }
            throw error
        }
        return (path, created)
    }

    /// Clears the way for bind: nothing there, or a socket of ours that no agent answers on.
    private static func removeStaleSocket(at path: String) throws(KeychainError) {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            guard errno == ENOENT else { throw SystemCallError.current("lstat").keychainError("inspect \(path)") }
            return
        }
        guard st.st_mode & S_IFMT == S_IFSOCK, st.st_uid == getuid() else {
            throw KeychainError(.duplicateItem, "\(path) exists and is not a socket of yours (a symlink, a file or another user's): refusing to replace it")
        }
        if let live = try? UnixSocket.connect(path: path) {
            live.close()
            throw KeychainError(.duplicateItem, "an agent already listens on \(path)")
        }
        guard unlink(path) == 0 else { throw SystemCallError.current("unlink").keychainError("remove the stale socket \(path)") }
    }

    private static func parent(of path: String) -> String {
        let trimmed = path.hasSuffix("/") ? String(path.dropLast()) : path
        guard let slash = trimmed.lastIndex(of: "/"), slash != trimmed.startIndex else { return "/" }
        return String(trimmed[..<slash])
    }
}
