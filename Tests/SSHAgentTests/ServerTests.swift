#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
@testable import SSHAgent
import Testing

/// The server over a real socket: framing, limits, who may connect, where the socket lives.
@Suite("The SSH agent server")
struct ServerTests {
    /// An agent serving the in-memory source in a fresh private directory.
    final class Running {
        let directory: String
        let socket: AgentSocket
        let source = MemoryKeySource()

        init() throws {
            var template = Array("/tmp/kca.XXXXXX".utf8CString)
            directory = String(cString: mkdtemp(&template)!)
            socket = try AgentSocket.listen(at: directory + "/sub/agent.sock")
            let server = AgentServer(agent: KeyAgent(source: source, log: { _ in }), listener: socket.listener, log: { _ in })
            _ = DetachedThread.start { server.run() }
        }

        deinit {
            socket.listener.shutdownBoth()
            socket.remove()
            rmdir(directory)
        }

        func connect() throws -> UnixSocket { try UnixSocket.connect(path: socket.path) }
    }

    func frame(_ message: [UInt8]) -> [UInt8] {
        var w = Wire()
        w.string(message)
        return w.bytes
    }

    /// Reads one answer, or nil when the agent closed the connection.
    func answer(_ s: UnixSocket) throws -> AgentResponse? {
        guard let message = try AgentFrame.read(from: s) else { return nil }
        return try AgentResponse(message: Array(message))
    }

    @Test func requestsFedOneByteAtATimeAreAnswered() throws {
        let agent = try Running()
        let s = try agent.connect()
        defer { s.close() }
        for byte in frame([11]) + frame([11]) {
            try s.writeAll([byte])
            usleep(1_000)
        }
        #expect(try answer(s) == .identities([]))
        #expect(try answer(s) == .identities([]))
    }

    @Test func aFrameOver256KiBClosesTheConnectionBeforeItsBodyIsRead() throws {
        let agent = try Running()
        let s = try agent.connect()
        defer { s.close() }
        try s.writeAll([0, 4, 0, 1, 11])
        #expect(try answer(s) == nil)
    }

    @Test func aFrameOfExactly256KiBIsRead() throws {
        let agent = try Running()
        let s = try agent.connect()
        defer { s.close() }
        var big = Wire()
        big.byte(13)
        big.string(TestKeys.ed25519().1.blob)
        big.string([UInt8](repeating: 0x61, count: AgentFrame.maximumLength - big.bytes.count - 8))
        big.uint32(0)
        #expect(big.bytes.count == AgentFrame.maximumLength)
        try s.writeAll(frame(big.bytes))
        #expect(try answer(s) == .failure)  // read in full; the key is unknown
    }

    @Test func aZeroLengthFrameClosesTheConnection() throws {
        let agent = try Running()
        let s = try agent.connect()
        defer { s.close() }
        try s.writeAll([0, 0, 0, 0])
        #expect(try answer(s) == nil)
    }

    @Test func anotherUsersConnectionIsRefusedAndOwnOrRootsAdmitted() {
        #expect(AgentServer.admits(PeerCredentials(pid: 1, uid: getuid(), gid: 0)))
        #expect(AgentServer.admits(PeerCredentials(pid: 1, uid: 0, gid: 0)))
        #expect(!AgentServer.admits(PeerCredentials(pid: 1, uid: getuid() == 0 ? 12_345 : getuid() + 1, gid: 0)))
        #expect(!AgentServer.admits(nil))
    }

    func mode(_ path: String) -> mode_t {
        var st = stat()
        lstat(path, &st)
        return st.st_mode & 0o7777
    }

    @Test func theSocketIs0600InADirectoryTheAgentCreated0700() throws {
        let agent = try Running()
        #expect(mode(agent.socket.path) == 0o600)
        #expect(mode(agent.directory + "/sub") == 0o700)
        #expect(agent.socket.createdDirectory == agent.directory + "/sub")
    }

    func scratch() -> String {
        var template = Array("/tmp/kca.XXXXXX".utf8CString)
        return String(cString: mkdtemp(&template)!)
    }

    @Test func aSymlinkAtThePathIsRefusedAndLeftAlone() {
        let dir = scratch()
        defer { unlink(dir + "/agent.sock"); rmdir(dir) }
        symlink("/etc/passwd", dir + "/agent.sock")
        #expect(throws: KeychainError(.duplicateItem, "")) { try AgentSocket.listen(at: dir + "/agent.sock") }
        var st = stat()
        #expect(lstat(dir + "/agent.sock", &st) == 0 && st.st_mode & S_IFMT == S_IFLNK)
    }

    @Test func aPlainFileAtThePathIsRefused() {
        let dir = scratch()
        defer { unlink(dir + "/agent.sock"); rmdir(dir) }
        close(open(dir + "/agent.sock", O_CREAT | O_WRONLY, 0o600))
        #expect(throws: KeychainError(.duplicateItem, "")) { try AgentSocket.listen(at: dir + "/agent.sock") }
    }

    @Test func aSocketAnotherUserOwnsIsRefused() throws {
        let dir = scratch()
        defer { unlink(dir + "/agent.sock"); rmdir(dir) }
        let stale = try UnixSocket.listen(path: dir + "/agent.sock", mode: 0o600)
        stale.close()
        chown(dir + "/agent.sock", 12_345, 12_345)
        #expect(throws: KeychainError(.duplicateItem, "")) { try AgentSocket.listen(at: dir + "/agent.sock") }
    }

    @Test func aStaleSocketOfOursIsReplacedButALiveAgentIsNot() throws {
        let dir = scratch()
        defer { unlink(dir + "/agent.sock"); rmdir(dir) }
        let stale = try UnixSocket.listen(path: dir + "/agent.sock", mode: 0o600)
        stale.close()
        let replaced = try AgentSocket.listen(at: dir + "/agent.sock")
        #expect(throws: KeychainError(.duplicateItem, "")) { try AgentSocket.listen(at: dir + "/agent.sock") }
        replaced.listener.close()
    }

    @Test func aDirectoryOthersCanEnterIsRefused() {
        let dir = scratch()
        defer { rmdir(dir) }
        chmod(dir, 0o755)
        #expect(throws: KeychainError(.param, "")) { try AgentSocket.listen(at: dir + "/agent.sock") }
    }

    @Test func aDirectoryThatIsASymlinkIsRefused() {
        let dir = scratch()
        defer { unlink(dir + "/link"); rmdir(dir + "/real"); rmdir(dir) }
        mkdir(dir + "/real", 0o700)
        symlink(dir + "/real", dir + "/link")
        #expect(throws: KeychainError(.param, "")) { try AgentSocket.listen(at: dir + "/link/agent.sock") }
    }

    @Test func aPathAShellWouldMisreadIsRefused() {
        #expect(throws: KeychainError(.param, "")) { try AgentSocket.listen(at: "/tmp/a b/agent.sock") }
        #expect(throws: KeychainError(.param, "")) { try AgentSocket.listen(at: "/tmp/$(x)/agent.sock") }
        #expect(throws: KeychainError(.param, "")) { try AgentSocket.listen(at: "relative/agent.sock") }
    }

    // MARK: attacks tried (docs/security.md, "Attacks tried: keys and the ssh-agent")

    func lockMessage(_ type: UInt8, _ passphrase: String) -> [UInt8] {
        var w = Wire()
        w.byte(type)
        w.string(Array(passphrase.utf8))
        return w.bytes
    }

    /// Guessing the ssh-add -x passphrase over many connections at once (a forwarded agent
    /// opens as many channels as the far side likes): the growing delay holds for the agent,
    /// so six parallel misses take 0.1 + 0.2 + ... + 0.6 s, not 0.6 s.
    @Test func unlockGuessesOverManyConnectionsWaitTheirTurn() throws {
        let agent = try Running()
        let owner = try agent.connect()
        defer { owner.close() }
        try owner.writeAll(frame(lockMessage(22, "right")))
        #expect(try answer(owner) == .success)
        let guessers = try (0..<6).map { _ in try agent.connect() }
        defer { guessers.forEach { $0.close() } }
        let start = MonotonicClock.nanoseconds()
        for (n, s) in guessers.enumerated() { try s.writeAll(frame(lockMessage(23, "guess\(n)"))) }
        for s in guessers { #expect(try answer(s) == .failure) }
        let seconds = Double(MonotonicClock.nanoseconds() - start) / 1e9
        #expect(seconds >= 2.0, "six wrong guesses took \(seconds) s")
        try owner.writeAll(frame(lockMessage(23, "right")))
        #expect(try answer(owner) == .success)
    }

    /// Connections past the cap are closed at once and the agent serves again when they end:
    /// threads stay bounded however many a client opens.
    @Test func connectionsPastTheCapAreClosedAndTheAgentRecovers() throws {
        let agent = try Running()
        let held = try (0..<AgentServer.maximumConnections).map { _ in try agent.connect() }
        for s in held {
            try s.writeAll(frame([11]))
            #expect(try answer(s) == .identities([]))
        }
        let extra = try agent.connect()
        try? extra.writeAll(frame([11]))
        #expect((try? answer(extra)) == nil)
        extra.close()
        held.forEach { $0.close() }
        // Each held connection's thread notices its close in its own time (later on a busy
        // machine): poll, bounded, for a new connection that is served.
        var served = false
        for _ in 0..<500 where !served {
            if let again = try? agent.connect() {
                served = (try? again.writeAll(frame([11]))) != nil && (try? answer(again)) == .identities([])
                again.close()
            }
            if !served { usleep(20_000) }
        }
        #expect(served, "no new connection was served within 10 s of the held ones closing")
    }

    /// A SIGN_REQUEST for a key the keychain does not hold, or a blob that is no key, is
    /// FAILURE and the connection stays usable.
    @Test func aSignatureForAKeyNotHeldIsFailureAndTheConnectionLives() throws {
        let agent = try Running()
        let s = try agent.connect()
        defer { s.close() }
        try s.writeAll(frame(TestKeys.signMessage(TestKeys.ed25519().1, [1])))
        #expect(try answer(s) == .failure)
        var junk = Wire()
        junk.byte(13)
        junk.string([0, 0, 0, 3, 0x61])
        junk.string([1])
        junk.uint32(0)
        try s.writeAll(frame(junk.bytes))
        #expect(try answer(s) == .failure)
        try s.writeAll(frame([11]))
        #expect(try answer(s) == .identities([]))
    }
}
