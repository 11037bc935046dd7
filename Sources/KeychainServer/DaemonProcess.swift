#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import Foundation
import KeychainModel

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
        let mode: mode_t = dir.hasPrefix("/tmp/") ? 0o700 : 0o755
        if mkdir(dir, mode) == 0 {
            chmod(dir, mode)  // the daemon's umask (077) applied to mkdir
        } else if errno != EEXIST {
            throw SystemCallError.current("mkdir").keychainError("cannot create \(dir)")
        }
        if dir.hasPrefix("/tmp/") {
            var st = stat()
            guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == getuid(), st.st_mode & 0o077 == 0 else {
                throw KeychainError(.io, "\(dir) is not a private directory owned by uid \(getuid()); remove it or choose another --socket")
            }
        }
    }
}
