import Foundation
import KeychainModel
import Testing

/// `[metrics] listen` (issue 27): a scraper reads the exposition over HTTP from a Unix socket
/// or a loopback port, from a listener that no path taken first, silent client, flood or
/// oversized request can turn against the daemon or its next scrape.
@Suite("The metrics listener", .serialized)
struct MetricsListenerTests {
    /// A directory of the test's own (root's, 0700) for the socket, removed after.
    final class SocketDirectory {
        let path: String
        init() throws {
            var template = Array("/tmp/kcm.XXXXXX".utf8CString)
            guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
            path = String(cString: p)
        }
        var socket: String { path + "/metrics.sock" }
        deinit { try? FileManager.default.removeItem(atPath: path) }
    }

    func daemon(listening socket: String, _ more: String = "") throws -> RunningDaemon {
        try RunningDaemon(config: "[metrics]\nlisten = \"unix:\(socket)\"\n\(more)")
    }

    /// curl's answer: its exit status, the HTTP status (-w) last on the output.
    func curl(_ arguments: [String]) throws -> (status: Int32, body: String, http: String) {
        let r = try runExecutable("/usr/bin/curl", ["-sS", "--max-time", "60", "-w", "\n%{http_code}"] + arguments,
                                  environment: [:], input: [])
        var lines = r.text.split(separator: "\n", omittingEmptySubsequences: false)
        let http = lines.popLast().map(String.init) ?? ""
        return (r.status, lines.joined(separator: "\n"), http)
    }

    func scrape(_ socket: String, path: String = "/metrics", _ extra: [String] = []) throws -> (status: Int32, body: String, http: String) {
        try curl(extra + ["--unix-socket", socket, "http://localhost" + path])
    }

    /// A connected Unix stream socket; closed by the caller.
    func connect(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else {
            close(fd)
            throw KeychainError(.io, "connect \(path): errno \(errno)")
        }
        // A guard against a hang, not a measure of speed.
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// Everything the peer sends until it closes.
    func readToEnd(_ fd: Int32) -> String {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            all += buffer[..<n]
        }
        return String(decoding: all, as: UTF8.self)
    }

    /// Starts keychaind expecting it to refuse: its exit status and what it said.
    func refusedStart(_ d: RunningDaemon) throws -> CLIResult {
        var env = ProcessInfo.processInfo.environment
        env["KEYCHAIND_INSECURE_FAST_KDF"] = "1"
        // Bounded: a daemon that starts after all is stopped by timeout (status 124), failing the test.
        return try runExecutable("/usr/bin/timeout", ["20", Binaries.keychaind, "--state-dir", d.stateDirectory,
                                                      "--socket", d.socketPath, "--config", d.configPath],
                                 environment: env, input: [])
    }

    func freeLoopbackPort() -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &a) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 ? getsockname(fd, $0, &length) : -1 }
        }
        return UInt16(bigEndian: a.sin_port)
    }

    /// The daemon's open sockets, from /proc/PID/fd.
    func openSockets(_ pid: Int32) -> Int {
        let dir = "/proc/\(pid)/fd"
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return entries.filter { ((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/" + $0)) ?? "").hasPrefix("socket:") }.count
    }

    // MARK: serving

    @Test func aScraperReadsTheExpositionFromAUnixSocketOfMode0600() throws {
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket)
        _ = try d.cli(["add", "--service", "svc-listener", "--account", "a"], input: bytes("s"))
        let r = try scrape(dir.socket)
        #expect(r.status == 0 && r.http == "200", "\(r)")
        #expect(r.body.contains("# TYPE keychaind_operations_total counter"))
        #expect(r.body.contains(#"keychaind_operations_total{operation="add",status="errSecSuccess",via="socket"} 1"#))
        var st = stat()
        #expect(lstat(dir.socket, &st) == 0 && st.st_mode & S_IFMT == S_IFSOCK)
        #expect(st.st_mode & 0o777 == 0o600 && st.st_uid == geteuid())
        d.stop()
        #expect(access(dir.socket, F_OK) != 0, "the socket file goes with the daemon")
    }

    @Test func aConfiguredGroupGetsTheSocketWithMode0660() throws {
        let group = try #require(getgrnam("nogroup")).pointee.gr_gid
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket, "group = \"nogroup\"")
        var st = stat()
        #expect(lstat(dir.socket, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o660 && st.st_gid == group)
        #expect(try scrape(dir.socket).http == "200")
        _ = d
    }

    @Test func aLoopbackPortServesTheExpositionWhenAllowed() throws {
        let port = freeLoopbackPort()
        let d = try RunningDaemon(config: "[metrics]\nlisten = \"tcp:127.0.0.1:\(port)\"\nallow_tcp = true\n")
        let r = try curl(["http://127.0.0.1:\(port)/metrics"])
        #expect(r.status == 0 && r.http == "200", "\(r) \(d.log)")
        #expect(r.body.contains("keychaind_locked 0"))
    }

    @Test func onlyGetOfMetricsIsServed() throws {
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket)
        #expect(try scrape(dir.socket, path: "/").http == "404")
        #expect(try scrape(dir.socket, path: "/metrics/../etc").http == "404")
        #expect(try scrape(dir.socket, ["-X", "POST"]).http == "405")
        #expect(try scrape(dir.socket, ["-X", "DELETE"]).http == "405")
        #expect(try scrape(dir.socket).http == "200")
        _ = d
    }

    // MARK: a path taken first

    func unstarted(listening socket: String) throws -> RunningDaemon {
        try RunningDaemon(config: "[metrics]\nlisten = \"unix:\(socket)\"\n", start: false)
    }

    @Test func aSymbolicLinkAtTheSocketPathIsRefusedAndNotFollowed() throws {
        let dir = try SocketDirectory()
        let target = dir.path + "/target"
        try "kept".write(toFile: target, atomically: false, encoding: .utf8)
        #expect(symlink(target, dir.socket) == 0)
        let r = try refusedStart(try unstarted(listening: dir.socket))
        #expect(r.status != 0 && r.status != 124, "\(r.stderr)")
        #expect(r.stderr.contains("is a symbolic link"), "\(r.stderr)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: dir.socket)) == target)
        #expect((try? String(contentsOfFile: target, encoding: .utf8)) == "kept")
    }

    @Test func aDanglingSymbolicLinkIsRefusedAndNothingIsMadeWhereItPoints() throws {
        let dir = try SocketDirectory()
        let target = dir.path + "/elsewhere.sock"
        #expect(symlink(target, dir.socket) == 0)
        let r = try refusedStart(try unstarted(listening: dir.socket))
        #expect(r.status != 0 && r.stderr.contains("is a symbolic link"), "\(r.stderr)")
        #expect(access(target, F_OK) != 0)
    }

    @Test func anotherUsersStaleSocketAtThePathIsRefusedAndLeftAsItIs() throws {
        let dir = try SocketDirectory()
        // A socket no one serves, as a crash leaves one, but of uid 65534.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: Array(dir.socket.utf8) + [0]) }
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        close(fd)
        #expect(bound == 0 && lchown(dir.socket, 65534, 65534) == 0)
        let r = try refusedStart(try unstarted(listening: dir.socket))
        #expect(r.status != 0 && r.stderr.contains("is a socket of uid 65534"), "\(r.stderr)")
        var st = stat()
        #expect(lstat(dir.socket, &st) == 0 && st.st_uid == 65534 && st.st_mode & S_IFMT == S_IFSOCK)
    }

    @Test func anotherUsersFileAtThePathIsRefusedAndLeftAsItIs() throws {
        let dir = try SocketDirectory()
        try "theirs".write(toFile: dir.socket, atomically: false, encoding: .utf8)
        #expect(chown(dir.socket, 65534, 65534) == 0)
        let r = try refusedStart(try unstarted(listening: dir.socket))
        #expect(r.status != 0 && r.stderr.contains("exists and is not a socket"), "\(r.stderr)")
        #expect((try? String(contentsOfFile: dir.socket, encoding: .utf8)) == "theirs")
    }

    @Test func aDirectoryOtherUsersMayWriteIsRefused() throws {
        let dir = try SocketDirectory()
        #expect(chmod(dir.path, 0o777) == 0)
        let r = try refusedStart(try unstarted(listening: dir.socket))
        #expect(r.status != 0 && r.stderr.contains("may be written by other users"), "\(r.stderr)")
        #expect(access(dir.socket, F_OK) != 0)
    }

    @Test func aDirectoryOfAnotherUserIsRefused() throws {
        let dir = try SocketDirectory()
        #expect(chown(dir.path, 65534, 65534) == 0)
        let r = try refusedStart(try unstarted(listening: dir.socket))
        #expect(r.status != 0 && r.stderr.contains("belongs to uid 65534"), "\(r.stderr)")
    }

    @Test func aDirectoryAboveThatOtherUsersMayWriteIsRefused() throws {
        let dir = try SocketDirectory()
        let open = dir.path + "/open", inner = dir.path + "/open/inner"
        #expect(mkdir(open, 0o777) == 0 && chmod(open, 0o777) == 0 && mkdir(inner, 0o700) == 0)
        let r = try refusedStart(try unstarted(listening: inner + "/metrics.sock"))
        #expect(r.status != 0 && r.stderr.contains("\(open) may be written by other users"), "\(r.stderr)")
        #expect(access(inner + "/metrics.sock", F_OK) != 0)
    }

    @Test func aLinkOnTheWayIsResolvedAndTheSocketMadeWhereItLeads() throws {
        let dir = try SocketDirectory()
        let real = dir.path + "/real"
        #expect(mkdir(real, 0o700) == 0 && symlink(real, dir.path + "/via") == 0)
        let d = try daemon(listening: dir.path + "/via/metrics.sock")
        var st = stat()
        #expect(lstat(real + "/metrics.sock", &st) == 0 && st.st_mode & S_IFMT == S_IFSOCK)
        #expect(try scrape(real + "/metrics.sock").http == "200")
        d.stop()
        #expect(access(real + "/metrics.sock", F_OK) != 0)
    }

    @Test func theStopLeavesWhatWasPutInTheSocketsPlace() throws {
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket)
        #expect(unlink(dir.socket) == 0)
        try "replacement".write(toFile: dir.socket, atomically: false, encoding: .utf8)
        d.stop()
        #expect((try? String(contentsOfFile: dir.socket, encoding: .utf8)) == "replacement")
    }

    // MARK: clients that attack

    @Test func aSilentClientDoesNotBlockTheNextScrape() throws {
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket)
        let silent = try connect(dir.socket)
        defer { close(silent) }
        let started = try connect(dir.socket)
        defer { close(started) }
        _ = write(started, "GET /metr", 9)  // a request begun and never finished
        let r = try scrape(dir.socket)
        #expect(r.status == 0 && r.http == "200", "\(r) \(d.log)")
    }

    @Test func aFloodOfConnectionsHoldsABoundedNumberOfDescriptorsAndTheScraperGetsThrough() throws {
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket)
        let before = openSockets(d.pid)
        var flood: [Int32] = []
        defer { flood.forEach { close($0) } }
        for _ in 0..<200 { flood.append(try connect(dir.socket)) }
        // Accepted after every connection of the flood: by then each of those was taken too.
        let r = try scrape(dir.socket)
        #expect(r.status == 0 && r.http == "200", "\(r)")
        let during = openSockets(d.pid)
        #expect(during <= before + 8, "\(during) sockets open, \(before) before the flood")
    }

    @Test func anOversizedRequestLineIsRefusedWith400() throws {
        let dir = try SocketDirectory()
        let d = try daemon(listening: dir.socket)
        let fd = try connect(dir.socket)
        defer { close(fd) }
        let request = Array(("GET /" + String(repeating: "a", count: 16_384) + " HTTP/1.1\r\nHost: x\r\n\r\n").utf8)
        _ = request.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let answer = readToEnd(fd)
        #expect(answer.hasPrefix("HTTP/1.1 400 "), "\(answer.prefix(200))")
        #expect(answer.contains("over 4096 bytes"))
        #expect(!answer.contains("keychaind_"))
        #expect(try scrape(dir.socket).http == "200")
        _ = d
    }

    @Test func aNonLoopbackAddressIsRefusedAtStart() throws {
        for listen in ["tcp:0.0.0.0:9184", "tcp:[::]:9184", "tcp:192.0.2.1:9184", "tcp:localhost:9184"] {
            let d = try RunningDaemon(config: "[metrics]\nlisten = \"\(listen)\"\nallow_tcp = true\n", start: false)
            let r = try refusedStart(d)
            #expect(r.status == 78, "\(listen): \(r.stderr)")
            #expect(r.stderr.contains("not a loopback address"), "\(listen): \(r.stderr)")
        }
    }

    @Test func aLoopbackPortWithoutAllowTCPIsRefusedAtStart() throws {
        let d = try RunningDaemon(config: "[metrics]\nlisten = \"tcp:127.0.0.1:9184\"\n", start: false)
        let r = try refusedStart(d)
        #expect(r.status == 78 && r.stderr.contains("allow_tcp"), "\(r.stderr)")
    }
}
