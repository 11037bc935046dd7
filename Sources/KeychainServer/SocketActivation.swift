#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol

/// A listening socket handed over by a service manager (systemd's socket activation, the
/// sd_listen_fds protocol): LISTEN_PID names the process it is meant for, LISTEN_FDS how many
/// descriptors follow from 3 on. Clients may connect before the daemon runs: the socket
/// already exists, and the manager starts the daemon on first use.
public enum SocketActivation {
    /// The first descriptor the protocol hands over (SD_LISTEN_FDS_START).
    public static let firstDescriptor: Int32 = 3

    public static let variables = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"]

    /// The socket to serve, or nil when none was handed to this process (no LISTEN_FDS, or a
    /// LISTEN_PID that is not `pid`: the variables were inherited from a parent that was
    /// activated, and the descriptors are not ours). A handed-over descriptor that is not one
    /// AF_UNIX SOCK_STREAM socket in the listening state is refused with errSecParam.
    public static func listener(environment: [String: String], pid: pid_t = getpid(),
                                descriptor: Int32 = firstDescriptor) throws(KeychainError) -> UnixSocket? {
        try listeners(environment: environment, pid: pid, descriptor: descriptor).main
    }

    /// The name (FileDescriptorName=) that marks the credential socket among the handed-over ones.
    public static let credentialSocketName = "credentials"

    /// The sockets handed over: the one to serve, and the credential socket when a second one
    /// is named `credentials` in LISTEN_FDNAMES (keychaind-credentials.socket).
    public static func listeners(environment: [String: String], pid: pid_t = getpid(),
                                 descriptor: Int32 = firstDescriptor) throws(KeychainError) -> (main: UnixSocket?, credentials: UnixSocket?) {
        guard let count = environment["LISTEN_FDS"] else { return (nil, nil) }
        guard let target = environment["LISTEN_PID"], let targetPID = pid_t(target), targetPID == pid else { return (nil, nil) }
        guard let n = Int(count), n >= 0 else {
            throw KeychainError(.param, "LISTEN_FDS=\(LogSafe.value(count)) is not a number of descriptors")
        }
        if n == 0 { return (nil, nil) }
        let names = (environment["LISTEN_FDNAMES"] ?? "").split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        let credentialIndex = n == 2 && names.count == 2 ? names.firstIndex(of: credentialSocketName) : nil
        guard n == 1 || credentialIndex != nil else {
            throw KeychainError(.param, "the service manager handed over \(n) sockets; keychaind serves one (give its .socket unit a single ListenStream=), and a second only when named \"\(credentialSocketName)\" (FileDescriptorName=)")
        }
        var main: UnixSocket?
        var credentials: UnixSocket?
        for index in 0..<n {
            let fd = descriptor + Int32(index)
            try check(fd)
            // Our children (none today) must not inherit the listeners.
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            if index == credentialIndex { credentials = UnixSocket(fd: fd) } else { main = UnixSocket(fd: fd) }
        }
        return (main, credentials)
    }

    /// Removes the variables, so that nothing this process starts takes them as meant for it.
    public static func forgetVariables() {
        for name in variables { unsetenv(name) }
    }

    /// The path a handed-over socket is bound to, for the log; nil for an unnamed one.
    public static func boundPath(of socket: UnixSocket) -> String? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let rc = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket.fd, $0, &length) }
        }
        guard rc == 0 else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        return path.isEmpty ? nil : path
    }

    private static func check(_ fd: Int32) throws(KeychainError) {
        let what = "descriptor \(fd) from the service manager (LISTEN_FDS)"
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            throw SystemCallError.current("fstat").keychainError("\(what) cannot be used", status: .param)
        }
        guard st.st_mode & S_IFMT == S_IFSOCK else {
            throw KeychainError(.param, "\(what) is not a socket")
        }
        guard option(fd, SO_DOMAIN) == AF_UNIX else {
            throw KeychainError(.param, "\(what) is not a Unix socket (AF_UNIX); use ListenStream= with a path")
        }
        guard option(fd, SO_TYPE) == Int32(SOCK_STREAM.rawValue) else {
            throw KeychainError(.param, "\(what) is not a stream socket (SOCK_STREAM); use ListenStream=")
        }
        guard option(fd, SO_ACCEPTCONN) == 1 else {
            throw KeychainError(.param, "\(what) is not listening; it must be the .socket unit's listening socket (Accept=no)")
        }
    }

    private static func option(_ fd: Int32, _ name: Int32) -> Int32? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
    }
}

/// A value from the environment, quoted for a message: short, and with no control characters.
enum LogSafe {
    static func value(_ s: String) -> String {
        "\"" + LogText.escape(String(s.prefix(64))) + "\""
    }
}
