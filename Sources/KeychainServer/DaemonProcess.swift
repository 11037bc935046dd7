#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import Foundation
import KeychainModel
import KeychainProtocol

/// Process-wide protections for the daemon (its signals: SignalEvents).
public enum DaemonProcess {
    /// Swift's crash backtracer prints registers and nearby memory, where keys may be: it must
    /// be off before the runtime could ever use it, which means before this process started.
    /// If it is not, re-exec ourselves with it off. Returns only if it already is, or exec failed.
    public static func ensureBacktracesDisabled() {
        if let v = getenv("SWIFT_BACKTRACE"), String(cString: v) == "enable=no" { return }
        setenv("SWIFT_BACKTRACE", "enable=no", 1)
        execv("/proc/self/exe", CommandLine.unsafeArgv)
        // exec failed: carry on; the hardening below still stops core dumps.
    }

    /// No core files, not dumpable or ptrace-able by same-uid processes, private file modes,
    /// and no death by SIGPIPE when a client hangs up mid-reply.
    public static func harden() throws {
        guard csystem_harden_process() == 0 else {
            throw SystemCallError.current("csystem_harden_process").keychainError("cannot harden the process", status: .internal)
        }
        umask(0o077)
        signal(SIGPIPE, SIG_IGN)
    }

    /// Creates the directory that holds a default socket path and checks that a directory
    /// under /tmp is ours and private (another user could have made it first). /run/keychaind
    /// is 0755 so that the socket's own mode decides who may connect; /tmp ones are 0700.
    public static func prepareSocketDirectory(for socketPath: String) throws {
        guard let slash = socketPath.lastIndex(of: "/") else { return }
        let dir = String(socketPath[..<slash])
        guard !dir.isEmpty else { return }
        if dir == DefaultPaths.homeSocketDirectory { return try prepareHomeSocketDirectory(dir) }
        let mode: mode_t = dir.hasPrefix("/tmp/") ? 0o700 : 0o755
        if mkdir(dir, mode) == 0 {
            chmod(dir, mode)  // the daemon's umask (077) applied to mkdir
        } else if errno != EEXIST {
            throw SystemCallError.current("mkdir").keychainError("cannot create \(dir)")
        }
        if dir.hasPrefix("/tmp/") {
            var st = stat()
            guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o077 == 0 else {
                // Reached only without HOME (else the default is the home directory's).
                throw KeychainError(.io, "\(dir) is not a private directory owned by uid \(getuid()) (another user may have made it first); set HOME (keychaind then listens in ~/.local/state/keychaind) or XDG_RUNTIME_DIR, or choose another --socket and give clients KEYCHAIN_SOCKET")
            }
        }
    }

    /// The default socket's directory when /tmp/keychaind-UID is another user's (DefaultPaths.
    /// homeSocketDirectory): made with its missing parents, mode 0700, and then it must be
    /// ours and private, as the /tmp one must.
    static func prepareHomeSocketDirectory(_ dir: String) throws {
        var path = ""
        for component in dir.split(separator: "/") {
            path += "/" + component
            if mkdir(path, 0o700) != 0 && errno != EEXIST {
                throw SystemCallError.current("mkdir").keychainError("cannot create \(path)")
            }
        }
        var st = stat()
        guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid() else {
            throw KeychainError(.io, "\(dir) is not a directory owned by uid \(getuid()); remove it, or set XDG_RUNTIME_DIR or --socket")
        }
        if st.st_mode & 0o077 != 0 { chmod(dir, 0o700) }
        // Whoever may rename entries of its parent could swap the directory for theirs.
        var parent = stat()
        let above = String(dir[..<dir.lastIndex(of: "/")!])
        guard lstat(above.isEmpty ? "/" : above, &parent) == 0, parent.st_uid == getuid() || parent.st_uid == 0,
              parent.st_mode & 0o022 == 0 else {
            throw KeychainError(.io, "\(above) may be changed by other users, so \(dir) is not safe for keychaind's socket; set XDG_RUNTIME_DIR or --socket")
        }
    }
}
