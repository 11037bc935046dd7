#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol

/// Serves the metrics to a scraper (`[metrics] listen`), on one thread of its own that never
/// touches the item socket's workers: each connection gets one `GET /metrics` (ScrapeRequest),
/// one answer, and is closed. All connections are multiplexed with poll on that thread, so a
/// client that sends nothing (or reads nothing) delays no other; each has `timeoutSeconds` from
/// its accept to its close, and at most `maxConnections` are open: a further one closes the
/// oldest, so a flood costs a bounded number of descriptors and a scraper still gets through.
final class MetricsListener: Sendable {
    private let listenerFD: Int32
    /// The Unix socket as bound: its path with no link in it, and its device and inode, so
    /// that the stop removes this socket and nothing else put at that name.
    private let boundSocket: (path: String, device: UInt64, inode: UInt64)?

    static let maxConnections = 8
    static let timeoutSeconds = 5

    /// Binds and listens; throws with a message fit for the operator when it cannot, or when
    /// the socket's path is not safe to take (MetricsListener.claim).
    init(_ settings: MetricsSettings, endpoint: MetricsEndpoint) throws(KeychainError) {
        switch endpoint {
        case .unix(let path):
            let real = try Self.safeDirectory(of: path) + "/" + (path.split(separator: "/").last.map(String.init) ?? "")
            listenerFD = try Self.listenUnix(path: real, groupID: settings.groupID, groupName: settings.group)
            var st = stat()
            guard lstat(real, &st) == 0 else {
                _ = Glibc.close(listenerFD)
                throw SystemCallError.current("lstat").keychainError("cannot find the metrics socket just made at \(real)")
            }
            boundSocket = (real, UInt64(st.st_dev), UInt64(st.st_ino))
        case .tcp(let address, let port):
            listenerFD = try Self.listenTCP(address: address, port: port)
            boundSocket = nil
        }
    }

    /// Closes the listening socket and removes the socket file this listener made.
    func close() {
        var st = stat()
        if let bound = boundSocket, lstat(bound.path, &st) == 0, st.st_mode & S_IFMT == S_IFSOCK,
           UInt64(st.st_dev) == bound.device, UInt64(st.st_ino) == bound.inode {
            unlink(bound.path)
        }
        _ = Glibc.close(listenerFD)
    }

    // MARK: the socket

    /// The Unix socket at `path`, mode 0600, or 0660 with group `groupID`. Another user must not
    /// be able to choose what this binds: the directory must be writable by no one but its
    /// owner (root or this uid), unless sticky; a symbolic link, a file of another kind and a
    /// socket of another uid at `path` are refused and left as they are; a socket of ours is
    /// replaced only when nothing answers on it. bind itself never follows a link or reuses a
    /// file, so nothing can be slipped in between the check and the bind.
    static func listenUnix(path: String, groupID: gid_t?, groupName: String?) throws(KeychainError) -> Int32 {
        try claim(path)
        guard let (named, length) = unixAddress(path) else { throw KeychainError(.param, "the metrics socket path \(path) is too long") }
        var address = named
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SystemCallError.current("socket").keychainError("cannot make the metrics socket") }
        // Connecting needs write permission on the socket: it never exists with more than 0600.
        let old = umask(0o177)
        let rc = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        let e = errno
        umask(old)
        guard rc == 0 else {
            _ = Glibc.close(fd)
            throw SystemCallError("bind", errno: e).keychainError("cannot listen for metrics on \(path)")
        }
        if let groupID {
            // The directory is ours or root's and not writable by others: the name still names our socket.
            guard lchown(path, uid_t.max, groupID) == 0 else {
                let e = errno
                unlink(path)
                _ = Glibc.close(fd)
                throw SystemCallError("chown", errno: e).keychainError("cannot give the metrics socket \(path) to group \(groupName ?? "\(groupID)") (keychaind's user must be a member: SupplementaryGroups=)")
            }
            chmod(path, 0o660)
        }
        guard listen(fd, 64) == 0 else {
            let e = errno
            unlink(path)
            _ = Glibc.close(fd)
            throw SystemCallError("listen", errno: e).keychainError("cannot listen for metrics on \(path)")
        }
        return fd
    }

    /// The directory that will hold the socket, with every link in its path resolved: it and
    /// each directory above it owned by root or this uid and writable by no one else (or
    /// sticky, as /tmp, where no one else may rename or remove what is not theirs). Then no
    /// other user can swap the directory, or one above it, for theirs after the check.
    static func safeDirectory(of path: String) throws(KeychainError) -> String {
        let given = path.lastIndex(of: "/").map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        guard let resolved = realpath(given, nil) else {
            throw SystemCallError.current("realpath").keychainError("cannot use \(given) for the metrics socket")
        }
        let real = String(cString: resolved)
        free(resolved)
        var directory = real
        while true {
            var st = stat()
            guard lstat(directory, &st) == 0 else {
                throw SystemCallError.current("lstat").keychainError("cannot use \(directory) for the metrics socket")
            }
            guard st.st_mode & S_IFMT == S_IFDIR else { throw KeychainError(.param, "\(directory) is not a directory: no place for the metrics socket") }
            guard st.st_uid == 0 || st.st_uid == geteuid() else {
                throw KeychainError(.param, "\(directory) belongs to uid \(st.st_uid): the metrics socket goes in a directory of root or of keychaind's uid, below such directories only")
            }
            guard st.st_mode & 0o022 == 0 || st.st_mode & S_ISVTX != 0 else {
                throw KeychainError(.param, "\(directory) may be written by other users (mode \(String(st.st_mode & 0o7777, radix: 8))): they could replace the metrics socket or its directory; choose a directory that only its owner writes, below such directories only")
            }
            guard directory != "/" else { return real }
            directory = directory.lastIndex(of: "/").map { $0 == directory.startIndex ? "/" : String(directory[..<$0]) } ?? "/"
        }
    }

    /// Makes `path` free, or refuses: nothing there is fine; a socket of this uid that no one
    /// serves (a crash's) is removed; anything else is someone's, and stays.
    static func claim(_ path: String) throws(KeychainError) {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            guard errno == ENOENT else { throw SystemCallError.current("lstat").keychainError("cannot use \(path) for the metrics socket") }
            return
        }
        let kind = st.st_mode & S_IFMT
        guard kind != S_IFLNK else {
            throw KeychainError(.param, "\(path) is a symbolic link: keychaind does not follow one to put its metrics socket elsewhere; remove it or choose another [metrics] listen")
        }
        guard kind == S_IFSOCK else { throw KeychainError(.param, "\(path) exists and is not a socket; remove it or choose another [metrics] listen") }
        guard st.st_uid == geteuid() else {
            throw KeychainError(.param, "\(path) is a socket of uid \(st.st_uid), not keychaind's: left as it is; remove it or choose another [metrics] listen")
        }
        if let probe = try? UnixSocket.connect(path: path) {
            probe.close()
            throw KeychainError(.param, "something already serves \(path); stop it or choose another [metrics] listen")
        }
        unlink(path)
    }

    static func unixAddress(_ path: String) -> (sockaddr_un, socklen_t)? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes + [0]) }
        return (address, socklen_t(MemoryLayout<sockaddr_un>.size))
    }

    /// A loopback TCP port (MetricsEndpoint.parse took only loopback addresses).
    static func listenTCP(address: String, port: UInt16) throws(KeychainError) -> Int32 {
        let v6 = address.contains(":")
        let fd = socket(v6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard fd >= 0 else { throw SystemCallError.current("socket").keychainError("cannot make the metrics socket") }
        var on: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        let rc: Int32
        if v6 {
            var a = sockaddr_in6()
            a.sin6_family = sa_family_t(AF_INET6)
            a.sin6_port = port.bigEndian
            _ = inet_pton(AF_INET6, address, &a.sin6_addr)
            rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        } else {
            var a = sockaddr_in()
            a.sin_family = sa_family_t(AF_INET)
            a.sin_port = port.bigEndian
            _ = inet_pton(AF_INET, address, &a.sin_addr)
            rc = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        guard rc == 0, listen(fd, 64) == 0 else {
            let e = errno
            _ = Glibc.close(fd)
            throw SystemCallError(rc == 0 ? "listen" : "bind", errno: e).keychainError("cannot listen for metrics on \(MetricsEndpoint.tcp(address: address, port: port))")
        }
        return fd
    }

    // MARK: serving

    /// One connection: what it sent so far, then the answer going out, then (its write side
    /// shut) reading until the client closes, so that a TCP client is not reset before it has
    /// read the answer.
    private struct Scrape {
        let fd: Int32
        let deadline: UInt64
        var received: [UInt8] = []
        var answer: [UInt8]?
        var written = 0
        var draining = false
    }

    /// Serves until `wake` becomes readable; `exposition` gives the text of each scrape.
    func run(wake: Int32, exposition: () -> String) {
        var scrapes: [Scrape] = []
        defer { for scrape in scrapes { _ = Glibc.close(scrape.fd) } }
        while true {
            var fds = [pollfd(fd: wake, events: Int16(POLLIN), revents: 0), pollfd(fd: listenerFD, events: Int16(POLLIN), revents: 0)]
            for scrape in scrapes {
                let wantsWrite = scrape.answer != nil && !scrape.draining
                fds.append(pollfd(fd: scrape.fd, events: Int16(wantsWrite ? POLLOUT : POLLIN), revents: 0))
            }
            let now = MonotonicClock.nanoseconds()
            let next = scrapes.map(\.deadline).min()
            let timeout = next.map { Int32(clamping: ($0 > now ? $0 - now : 0) / 1_000_000 + 1) } ?? -1
            guard poll(&fds, nfds_t(fds.count), timeout) >= 0 || errno == EINTR else {
                usleep(50_000)  // e.g. ENOMEM: do not spin
                continue
            }
            if fds[0].revents != 0 { return }
            var open: [Scrape] = []
            let after = MonotonicClock.nanoseconds()
            for (index, var scrape) in scrapes.enumerated() {
                let events = fds[index + 2].revents
                if after >= scrape.deadline || (events != 0 && !step(&scrape, exposition)) {
                    _ = Glibc.close(scrape.fd)
                } else {
                    open.append(scrape)
                }
            }
            scrapes = open
            if fds[1].revents != 0 { acceptAll(into: &scrapes) }
        }
    }

    /// Takes every pending connection; over the limit, the oldest open one is closed for it.
    private func acceptAll(into scrapes: inout [Scrape]) {
        while true {
            let fd = accept(listenerFD, nil, nil)
            guard fd >= 0 else {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return  // EAGAIN: none left; EMFILE and the like: try at the next poll
            }
            // (accept4 is not in Swift's Glibc module.)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            if scrapes.count >= Self.maxConnections {
                _ = Glibc.close(scrapes.removeFirst().fd)
            }
            scrapes.append(Scrape(fd: fd, deadline: MonotonicClock.nanoseconds() + UInt64(Self.timeoutSeconds) * 1_000_000_000))
        }
    }

    /// Moves a connection on; false when it is done (closed by either side, or refused).
    private func step(_ scrape: inout Scrape, _ exposition: () -> String) -> Bool {
        if scrape.draining {
            var sink = [UInt8](repeating: 0, count: 4096)
            let n = recv(scrape.fd, &sink, sink.count, 0)
            return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))
        }
        if scrape.answer == nil {
            var chunk = [UInt8](repeating: 0, count: ScrapeRequest.maxHeadBytes - scrape.received.count)
            let n = recv(scrape.fd, &chunk, chunk.count, 0)
            if n < 0 { return errno == EAGAIN || errno == EINTR }
            if n == 0 { return false }
            scrape.received += chunk[..<n]
            switch ScrapeRequest.parse(scrape.received) {
            case .incomplete: return true
            case .metrics: scrape.answer = ScrapeRequest.response(status: 200, body: exposition(), contentType: ScrapeRequest.expositionType)
            case .refused(let status, let reason): scrape.answer = ScrapeRequest.response(status: status, body: reason + "\n")
            }
            scrape.received = []
        }
        guard let answer = scrape.answer else { return true }
        let n = answer.withUnsafeBytes { send(scrape.fd, $0.baseAddress! + scrape.written, answer.count - scrape.written, Int32(MSG_NOSIGNAL)) }
        if n < 0 { return errno == EAGAIN || errno == EINTR }
        scrape.written += n
        if scrape.written == answer.count {
            shutdown(scrape.fd, Int32(SHUT_WR))
            scrape.draining = true
        }
        return true
    }
}
