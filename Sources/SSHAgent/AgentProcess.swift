#if canImport(Glibc)
import Glibc
#endif
import CSystemShim

/// What the agent's process does beyond serving: staying out of core dumps and ptrace, going
/// to the background like `ssh-agent`, removing its socket when told to stop, and where its
/// messages go.
public enum AgentProcess {
    /// Private keys pass through the agent on their way into keychaind (ssh-add), and a lock
    /// passphrase stays in it: no core file or same-uid debugger may read them.
    public static func harden() {
        _ = csystem_harden_process()
        signal(SIGPIPE, SIG_IGN)
    }

    /// Forks; the parent gets the child's pid, the child nil. The child leaves the caller's
    /// session and terminal, and points its standard streams at /dev/null so that
    /// `eval "$(keychain ssh-agent)"` sees the end of the output at once. Called before any
    /// thread starts: a fork copies only the calling thread.
    /// Every other descriptor is closed but `keeping` (the listener): one inherited from the
    /// caller (a pipe `$(...)` reads, a supervisor's exit watch) would otherwise stay open for
    /// the agent's life and keep its reader waiting.
    public static func detach(keeping: Int32) -> pid_t? {
        let pid = fork()
        guard pid == 0 else { return pid }
        setsid()
        let null = open("/dev/null", O_RDWR)
        if null >= 0 {
            for fd: Int32 in 0...2 { dup2(null, fd) }
        }
        let limit = min(Int32(clamping: sysconf(Int32(_SC_OPEN_MAX))), 65_536)
        for fd in 3..<max(3, limit) where fd != keeping { close(fd) }
        return nil
    }

    /// On SIGTERM, SIGINT or SIGHUP: remove the socket (and the directory made for it), exit.
    public static func removeOnExit(_ socket: AgentSocket) {
        cleanupPaths = (strdup(socket.path), socket.createdDirectory.map { strdup($0) })
        var stopSignals = sigset_t()
        sigemptyset(&stopSignals)
        for s in [SIGTERM, SIGINT, SIGHUP] {
            signal(s, removeSocketAndExit)
            sigaddset(&stopSignals, s)
        }
        // A parent may have started us with signals blocked (test runners and some service
        // managers' threads do): stopping must work regardless. Threads made later inherit this.
        pthread_sigmask(SIG_UNBLOCK, &stopSignals, nil)
    }

    /// A log line sink: standard error in the foreground, syslog (the journal) once detached.
    public static func logger(detached: Bool) -> @Sendable (String) -> Void {
        if detached {
            openlog("keychain-ssh-agent", LOG_PID, LOG_USER)
            return { line in
                line.withCString { text in withVaList([text]) { vsyslog(LOG_NOTICE, "%s", $0) } }
            }
        }
        return { line in
            let bytes = Array("keychain ssh-agent: \(line)\n".utf8)
            bytes.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
        }
    }
}

/// Set once, before the handlers are installed; read only by them.
private nonisolated(unsafe) var cleanupPaths: (socket: UnsafeMutablePointer<CChar>?, directory: UnsafeMutablePointer<CChar>?) = (nil, nil)

/// The stop signals' handler: only async-signal-safe calls.
private func removeSocketAndExit(_ signal: Int32) {
    if let p = cleanupPaths.socket { unlink(p) }
    if let d = cleanupPaths.directory { rmdir(d) }
    _exit(0)
}
