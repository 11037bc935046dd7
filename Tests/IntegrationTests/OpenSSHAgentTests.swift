import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// `keychain ssh-agent` against a real keychaind and OpenSSH's own tools: ssh-add, ssh-keygen
/// -Y, and a login to a real sshd on loopback (docs/ssh-agent.md).
@Suite("keychain ssh-agent with OpenSSH", .serialized)
final class OpenSSHAgentTests {
    let daemon: RunningDaemon
    let connection: KeychainConnection
    /// A private scratch directory; the agent's socket directory is made inside it.
    let scratch: String
    let socketPath: String
    let agent: Process
    let agentLog: String

    convenience init() throws { try self.init(daemon: RunningDaemon()) }

    init(daemon: RunningDaemon) throws {
        self.daemon = daemon
        connection = KeychainConnection(socketPath: daemon.socketPath)
        var template = Array("/tmp/kcs.XXXXXX".utf8CString)
        scratch = String(cString: mkdtemp(&template)!)
        socketPath = scratch + "/agent/sock"
        agentLog = scratch + "/agent.log"
        FileManager.default.createFile(atPath: agentLog, contents: nil)
        agent = Process()
        agent.executableURL = URL(fileURLWithPath: Binaries.keychain)
        agent.arguments = ["ssh-agent", "--foreground", "--listen", socketPath]
        agent.environment = ["KEYCHAIN_SOCKET": daemon.socketPath, "PATH": "/usr/bin:/bin"]
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: agentLog))
        agent.standardError = log
        agent.standardOutput = log
        try agent.run()
        // Ready once it accepts: the socket's file exists from bind(), a moment before listen().
        // A loop that stops at the first accepted probe: `for … where !accepts` went on probing
        // 2000 times, and the agent, still closing those probes, could hold more than its 64
        // connections when a test's own arrived and close that one unanswered.
        var probes = 0
        while !Self.accepts(socketPath) && probes < 2000 {
            probes += 1
            usleep(10_000)
        }
    }

    static func accepts(_ path: String) -> Bool {
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(s) }
        var addr = RecordingProxy.address(path)
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        } == 0
    }

    deinit {
        if agent.isRunning {
            agent.terminate()
            agent.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: scratch)
    }

    var log: String { (try? String(contentsOfFile: agentLog, encoding: .utf8)) ?? "" }

    /// Runs an OpenSSH tool with SSH_AUTH_SOCK pointing at the agent.
    func ssh(_ tool: String, _ arguments: [String], input: [UInt8] = [], asUser uid: UInt32? = nil,
             socket: String? = nil) throws -> CLIResult {
        try runExecutable("/usr/bin/" + tool, arguments,
                          environment: ["SSH_AUTH_SOCK": socket ?? socketPath, "PATH": "/usr/bin:/bin", "HOME": scratch],
                          input: input, asUser: uid)
    }

    func sshKey(_ type: KeyType, label: String) throws -> KeychainKey {
        try KeychainKey.generate(type, label: label, applicationTag: KeychainKey.sshTag, connection: connection)
    }

    /// `type base64` of a keychain key, as ssh-add -L prints it before the comment.
    func authorizedKey(_ key: KeychainKey) -> String {
        "\(key.sshKeyType!) \(Data(key.sshPublicKeyBlob!).base64EncodedString())"
    }

    @Test func sshAddListsTheKeychainsSSHKeysAndNoOthers() throws {
        let ed = try sshKey(.ed25519, label: "ed@test")
        let p256 = try sshKey(.p256, label: "p256@test")
        _ = try KeychainKey.generate(.ed25519, label: "not for ssh", connection: connection)
        let listed = try ssh("ssh-add", ["-L"])
        #expect(listed.status == 0, "\(listed.stderr)")
        let lines = Set(listed.text.split(separator: "\n").map(String.init))
        #expect(lines == [authorizedKey(ed) + " ed@test", authorizedKey(p256) + " p256@test"])
    }

    @Test func theSocketIs0600InA0700Directory() throws {
        let socket = try FileManager.default.attributesOfItem(atPath: socketPath)
        let directory = try FileManager.default.attributesOfItem(atPath: scratch + "/agent")
        #expect((socket[.posixPermissions] as? Int) == 0o600)
        #expect((directory[.posixPermissions] as? Int) == 0o700)
    }

    @Test func sshKeygenSignaturesMadeThroughTheAgentVerify() throws {
        for type in [KeyType.ed25519, .p256] {
            let key = try sshKey(type, label: "signer-\(type)")
            let pub = scratch + "/signer-\(type).pub"
            try (authorizedKey(key) + "\n").write(toFile: pub, atomically: true, encoding: .utf8)
            let message = scratch + "/message-\(type)"
            try "release v1.2.3\n".write(toFile: message, atomically: true, encoding: .utf8)
            let signed = try ssh("ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", message])
            #expect(signed.status == 0, "\(signed.stderr)")
            let signers = scratch + "/allowed-\(type)"
            try "signer@test \(authorizedKey(key))\n".write(toFile: signers, atomically: true, encoding: .utf8)
            let verified = try ssh("ssh-keygen", ["-Y", "verify", "-f", signers, "-I", "signer@test", "-n", "file", "-s", message + ".sig"],
                                   input: Array("release v1.2.3\n".utf8))
            #expect(verified.status == 0, "\(type): \(verified.stderr) \(verified.text)")
            // And a changed message does not.
            let forged = try ssh("ssh-keygen", ["-Y", "verify", "-f", signers, "-I", "signer@test", "-n", "file", "-s", message + ".sig"],
                                 input: Array("release v6.6.6\n".utf8))
            #expect(forged.status != 0)
        }
    }

    /// The private part of an unencrypted OpenSSH key file (openssh-key-v1): Ed25519's seed
    /// or ECDSA's scalar, for checking that it never comes back out.
    func privatePart(ofKeyFile path: String) throws -> [UInt8] {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let body = text.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        let blob = Array(Data(base64Encoded: body)!)
        var at = 15  // "openssh-key-v1\0"
        func uint32() -> Int {
            defer { at += 4 }
            return blob[at..<(at + 4)].reduce(0) { $0 << 8 | Int($1) }
        }
        func string() -> [UInt8] {
            let n = uint32()
            defer { at += n }
            return Array(blob[at..<(at + n)])
        }
        _ = string(); _ = string(); _ = string()  // cipher, kdf, kdf options: none
        #expect(uint32() == 1)
        _ = string()  // public key
        let block = string()
        var inner = 8  // two check words
        func innerString() -> [UInt8] {
            let n = block[inner..<(inner + 4)].reduce(0) { $0 << 8 | Int($1) }
            defer { inner += 4 + n }
            return Array(block[(inner + 4)..<(inner + 4 + n)])
        }
        let type = String(decoding: innerString(), as: UTF8.self)
        if type == "ssh-ed25519" {
            _ = innerString()
            return Array(innerString().prefix(32))
        }
        _ = innerString(); _ = innerString()  // curve, point
        return Array(innerString().drop { $0 == 0 })
    }

    /// Forwards one client connection to the agent and records everything the agent answered.
    final class RecordingProxy: @unchecked Sendable {
        let path: String
        private let listener: Int32
        private let lock = NSLock()
        private var recorded: [UInt8] = []
        var answers: [UInt8] { lock.withLock { recorded } }

        init(path: String, agent: String) {
            self.path = path
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            listener = fd
            var addr = Self.address(path)
            _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
            listen(fd, 16)
            Thread.detachNewThread { [self] in
                while true {
                    let client = accept(fd, nil, nil)
                    guard client >= 0 else { return }
                    let upstream = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
                    var addr = Self.address(agent)
                    _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
                    Thread.detachNewThread { Self.pump(from: client, to: upstream, record: nil) }
                    Thread.detachNewThread { [self] in Self.pump(from: upstream, to: client) { bytes in self.lock.withLock { self.recorded += bytes } } }
                }
            }
        }

        deinit { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }

        static func pump(from: Int32, to: Int32, record: (([UInt8]) -> Void)?) {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = read(from, &buffer, buffer.count)
                guard n > 0 else { break }
                record?(Array(buffer[0..<n]))
                _ = buffer.withUnsafeBytes { write(to, $0.baseAddress, n) }
            }
            shutdown(to, Int32(SHUT_WR))
        }

        static func address(_ path: String) -> sockaddr_un {
            var addr = sockaddr_un()
            addr.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &addr.sun_path) { buf in
                let b = Array(path.utf8)
                buf.copyBytes(from: b)
                buf[b.count] = 0
            }
            return addr
        }
    }

    @Test func sshAddImportsKeyFilesAsNonExtractableKeysWhosePrivatePartNeverComesBack() throws {
        let proxy = RecordingProxy(path: scratch + "/proxy", agent: socketPath)
        for (type, bits) in [("ed25519", "256"), ("ecdsa", "256")] {
            let file = scratch + "/id_\(type)"
            let made = try runExecutable("/usr/bin/ssh-keygen", ["-q", "-t", type, "-b", bits, "-N", "", "-C", "file-\(type)", "-f", file],
                                         environment: ["PATH": "/usr/bin:/bin"], input: [])
            #expect(made.status == 0, "\(made.stderr)")
            let added = try ssh("ssh-add", [file], socket: proxy.path)
            #expect(added.status == 0, "\(added.stderr)")
            let publicLine = try String(contentsOfFile: file + ".pub", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
            let listed = try ssh("ssh-add", ["-L"], socket: proxy.path)
            #expect(listed.text.contains(publicLine), "\(listed.text)")
            // Signing with the imported key works too.
            let signed = try ssh("ssh-keygen", ["-Y", "sign", "-f", file + ".pub", "-n", "file", file + ".pub"], socket: proxy.path)
            #expect(signed.status == 0, "\(signed.stderr)")

            let stored = try KeychainKey.find(label: "file-\(type)", connection: connection)
            #expect(stored.count == 1)
            #expect(stored.first?.extractable == false)
            #expect(stored.first?.applicationTag == KeychainKey.sshTag)

            let secret = try privatePart(ofKeyFile: file)
            #expect(secret.count >= 31)
            #expect(!contains(proxy.answers, secret), "an agent answer carried the private key")
            // Nor does keychaind hand it out when asked for the item's data.
            var query: AttributeDictionary = ["class": .string("keys"), "labl": .string("file-\(type)"), "r_Data": .bool(true)]
            query["m_Limit"] = .string("m_LimitAll")
            if case .list(let items)? = try? connection.copyMatching(query) {
                for case .data(let data) in items { #expect(!contains(Array(data), secret)) }
            }
        }
        #expect(!proxy.answers.isEmpty)
    }

    func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count, !needle.isEmpty else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    @Test func removeHidesAKeyFromTheAgentButKeepsItInTheKeychain() throws {
        let key = try sshKey(.ed25519, label: "hidden@test")
        let pub = scratch + "/hidden.pub"
        try (authorizedKey(key) + "\n").write(toFile: pub, atomically: true, encoding: .utf8)
        #expect(try ssh("ssh-add", ["-d", pub]).status == 0)
        #expect(try ssh("ssh-add", ["-L"]).text.contains(authorizedKey(key)) == false)
        #expect(try KeychainKey.find(label: "hidden@test", connection: connection).count == 1)
    }

    /// An ADD that names a hidden key's public half with a private half that is not its own
    /// (the far side of a forwarded agent may well know the public key) does not bring the key
    /// back and stores nothing; the key's own private half does (docs/security.md).
    @Test func aHiddenKeyComesBackOnlyForItsOwnPrivateHalf() throws {
        let ed = try KeychainKey.generate(.ed25519, label: "ed-hidden", extractable: true, applicationTag: KeychainKey.sshTag,
                                          connection: connection)
        let p256 = try sshKey(.p256, label: "p256-hidden")
        for key in [ed, p256] {
            let pub = scratch + "/\(key.label).pub"
            try (authorizedKey(key) + "\n").write(toFile: pub, atomically: true, encoding: .utf8)
            #expect(try ssh("ssh-add", ["-d", pub]).status == 0)
        }
        func string(_ b: [UInt8]) -> [UInt8] { [UInt8(b.count >> 24), UInt8(b.count >> 16 & 0xff), UInt8(b.count >> 8 & 0xff), UInt8(b.count & 0xff)] + b }
        func answerType(_ message: [UInt8]) throws -> UInt8 {
            let s = try UnixSocket.connect(path: socketPath)
            defer { s.close() }
            try s.writeAll(string(message))
            var answer = [UInt8](repeating: 0, count: 5)
            var got = 0
            while got < 5 {
                let n = answer.withUnsafeMutableBytes { recv(s.fd, $0.baseAddress! + got, 5 - got, 0) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                got += n
            }
            return got == 5 ? answer[4] : 0
        }
        let forgedEd = [17] + string(bytes("ssh-ed25519")) + string(ed.publicKey)
            + string([UInt8](repeating: 7, count: 32) + ed.publicKey) + string(bytes("forged"))
        let forgedP256 = [17] + string(bytes("ecdsa-sha2-nistp256")) + string(bytes("nistp256")) + string(p256.publicKey)
            + string([1]) + string(bytes("forged"))
        #expect(try answerType(forgedEd) == 5)  // SSH_AGENT_FAILURE
        #expect(try answerType(forgedP256) == 5)
        let listed = try ssh("ssh-add", ["-L"]).text
        #expect(!listed.contains(authorizedKey(ed)) && !listed.contains(authorizedKey(p256)), "\(listed)")
        #expect(try KeychainKey.find(applicationTag: KeychainKey.sshTag, connection: connection).count == 2)
        guard case .single(.data(let seed)) = try connection.copyMatching(["class": .string("keys"), "labl": .string("ed-hidden"),
                                                                          "r_Data": .bool(true)]) else {
            Issue.record("the extractable key's seed was not returned")
            return
        }
        let realEd = [17] + string(bytes("ssh-ed25519")) + string(ed.publicKey) + string(Array(seed) + ed.publicKey) + string(bytes("real"))
        #expect(try answerType(realEd) == 6)  // SSH_AGENT_SUCCESS
        #expect(try ssh("ssh-add", ["-L"]).text.contains(authorizedKey(ed)))
    }

    @Test func aConstrainedAddIsRefusedAndStoresNothing() throws {
        let file = scratch + "/id_lifetime"
        _ = try runExecutable("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "lifetime", "-f", file],
                              environment: ["PATH": "/usr/bin:/bin"], input: [])
        let added = try ssh("ssh-add", ["-t", "60", file])
        #expect(added.status != 0)
        #expect(try KeychainKey.find(label: "lifetime", connection: connection).isEmpty)
    }

    @Test func anotherUsersConnectionIsRefusedEvenWhenTheFileModesWouldAllowIt() throws {
        _ = try sshKey(.ed25519, label: "mine")
        let nobody: UInt32 = 65_534
        // Loosen the modes, as a mistake might: the SO_PEERCRED check must still refuse.
        chmod(scratch, 0o755)
        chmod(scratch + "/agent", 0o755)
        chmod(socketPath, 0o666)
        let listed = try ssh("ssh-add", ["-L"], asUser: nobody)
        #expect(listed.status != 0)
        #expect(!listed.text.contains("ssh-ed25519"))
        #expect(log.contains("refused a connection from uid 65534"), "\(log)")
        #expect(try ssh("ssh-add", ["-L"]).text.contains("ssh-ed25519"))  // the owner still is served
    }

    /// Sends one message to the agent and returns its answer (length prefix included).
    func exchange(_ body: [UInt8]) -> [UInt8] {
        _ = brokenPipesAreErrors
        let s = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(s) }
        var addr = RecordingProxy.address(socketPath)
        let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        #expect(rc == 0)
        let frame = wireString(body)
        _ = frame.withUnsafeBytes { write(s, $0.baseAddress, $0.count) }
        var answer = [UInt8](repeating: 0, count: 64)
        var n: Int
        // SIGCHLD from other suites' child processes interrupts the read: try again.
        repeat { n = read(s, &answer, answer.count) } while n < 0 && errno == EINTR
        if n <= 0 {
            // Seen once in a parallel run (an empty answer, cause unknown): say what the read
            // and the agent saw, for the next time.
            let why = n == 0 ? "end of file" : String(cString: strerror(errno))
            Issue.record("no answer from the agent: read returned \(n) (\(why)); agent log: \(log)")
        }
        return Array(answer[0..<max(0, n)])
    }

    func wireString(_ bytes: [UInt8]) -> [UInt8] {
        [UInt8(bytes.count >> 24), UInt8(bytes.count >> 16 & 0xff), UInt8(bytes.count >> 8 & 0xff), UInt8(bytes.count & 0xff)] + bytes
    }

    @Test func anUnsupportedExtensionGetsTheFailureAnswer() throws {
        #expect(exchange([27] + wireString(Array("no-such-extension@example.com".utf8))) == [0, 0, 0, 1, 5])
    }

    @Test func anEd25519AddWhosePublicKeyIsNotTheSeedsIsRefusedAndNotKept() throws {
        let seed = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let claimed = (0..<32).map { _ in UInt8.random(in: 0...255) }
        let add: [UInt8] = [17] + wireString(Array("ssh-ed25519".utf8)) + wireString(claimed) + wireString(seed + claimed)
            + wireString(Array("forged".utf8))
        #expect(exchange(add) == [0, 0, 0, 1, 5])
        #expect(try KeychainKey.find(label: "forged", connection: connection).isEmpty)
        #expect(!(try ssh("ssh-add", ["-L"]).text.contains("forged")))
    }

    @Test func aLockedKeychainRefusesTheSignatureAndTheAgentSaysToUnlock() throws {
        let key = try sshKey(.ed25519, label: "locked@test")
        let pub = scratch + "/locked.pub"
        try (authorizedKey(key) + "\n").write(toFile: pub, atomically: true, encoding: .utf8)
        // The agent has seen the key while the keychain was open (as after a login).
        #expect(try ssh("ssh-add", ["-L"]).text.contains(authorizedKey(key)))
        try connection.setPasscode(Array("1234".utf8))
        try connection.lock()
        let signed = try ssh("ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", pub])
        #expect(signed.status != 0)
        #expect(signed.stderr.contains("agent refused operation"), "\(signed.stderr)")
        #expect(log.contains("keychain unlock"), "\(log)")
        try connection.unlock(passcode: Array("1234".utf8))
        #expect(try ssh("ssh-keygen", ["-Y", "sign", "-f", pub, "-n", "file", pub]).status == 0)
    }

    @Test func withoutForegroundItPrintsTheShellLinesAndServesFromTheBackground() throws {
        _ = try sshKey(.p256, label: "background@test")
        let path = scratch + "/bg/sock"
        let started = try runExecutable(Binaries.keychain, ["ssh-agent", "--listen", path],
                                        environment: ["KEYCHAIN_SOCKET": daemon.socketPath], input: [])
        #expect(started.status == 0, "\(started.stderr)")
        let lines = started.text.split(separator: "\n").map(String.init)
        #expect(lines.first == "SSH_AUTH_SOCK=\(path); export SSH_AUTH_SOCK;")
        let pid = lines.dropFirst().first.flatMap { Int32($0.dropFirst("SSH_AGENT_PID=".count).prefix { $0.isNumber }) }
        #expect(pid != nil && pid != agent.processIdentifier)
        #expect(try ssh("ssh-add", ["-l"], socket: path).text.contains("background@test"))
        if let pid { kill(pid, SIGTERM) }
        for _ in 0..<200 where FileManager.default.fileExists(atPath: path) { usleep(10_000) }
        #expect(!FileManager.default.fileExists(atPath: scratch + "/bg"))
    }

    @Test func aSecondAgentOnALiveSocketIsRefused() throws {
        let second = try runExecutable(Binaries.keychain, ["ssh-agent", "--listen", socketPath],
                                       environment: ["KEYCHAIN_SOCKET": daemon.socketPath], input: [])
        #expect(second.status != 0)
        #expect(second.stderr.contains("already listens"), "\(second.stderr)")
        #expect(try ssh("ssh-add", ["-l"]).status != 2)  // the first still serves
    }

    @Test func theAgentRemovesItsSocketAndDirectoryWhenStopped() throws {
        agent.terminate()
        agent.waitUntilExit()
        #expect(!FileManager.default.fileExists(atPath: socketPath))
        #expect(!FileManager.default.fileExists(atPath: scratch + "/agent"))
    }
}

/// A login to a real sshd on 127.0.0.1 with a key that exists only in keychaind.
@Suite("keychain ssh-agent logs in to a real sshd", .serialized)
struct SSHDLoginTests {
    static let user = "kcsshtest"

    /// The test user: a real account with a shell and no usable password (not locked, or sshd
    /// refuses it outright).
    static func ensureUser() throws {
        if getpwnam(user) == nil {
            _ = try runExecutable("/usr/sbin/useradd", ["--create-home", "--shell", "/bin/sh", user], environment: [:], input: [])
        }
        _ = try runExecutable("/usr/sbin/usermod", ["--password", "*", user], environment: [:], input: [])
        guard getpwnam(user) != nil else { throw KeychainError(.io, "useradd \(user) failed") }
    }

    /// A port nothing held a moment ago: another test may take it before sshd binds it,
    /// which `startSSHD` sees in sshd's log and answers with another port.
    static func unusedPort() -> UInt16 {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(s) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &length) } }
        return UInt16(bigEndian: addr.sin_port)
    }

    /// sshd, listening: ready when its log says it listens on the port (not when a connect to
    /// the port succeeds, which another test's listener there would answer too), started
    /// again on another port when the one it was given was taken first.
    static func startSSHD(_ dir: String, config: (UInt16) -> String) throws -> (pid: pid_t, port: UInt16) {
        for _ in 0..<5 {
            let port = unusedPort()
            let log = dir + "/sshd.log"
            try? FileManager.default.removeItem(atPath: log)
            try config(port).write(toFile: dir + "/sshd_config", atomically: true, encoding: .utf8)
            // posix_spawn, not Process: sshd closes every inherited descriptor at start, which
            // Foundation takes for an exit and then waits for it, stalling every other Process.
            let arguments: [String] = ["/usr/sbin/sshd", "-D", "-e", "-E", log, "-f", dir + "/sshd_config"]
            let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
            defer { argv.forEach { free($0) } }
            var pid: pid_t = 0
            guard posix_spawn(&pid, "/usr/sbin/sshd", nil, nil, argv, environ) == 0 else { throw KeychainError(.io, "cannot start sshd") }
            var exited = false
            for _ in 0..<3000 {
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                if text.contains("Server listening on 127.0.0.1 port \(port).") { return (pid, port) }
                var status: Int32 = 0
                if waitpid(pid, &status, WNOHANG) == pid { exited = true; break }
                usleep(10_000)
            }
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if !exited {
                kill(pid, SIGTERM)
                var status: Int32 = 0
                waitpid(pid, &status, 0)
                throw KeychainError(.io, "sshd did not say it listens within 30 s: \(text)")
            }
            guard text.contains("Address already in use") else { throw KeychainError(.io, "sshd exited: \(text)") }
        }
        throw KeychainError(.io, "sshd found each of 5 ports taken")
    }

    @Test(arguments: [KeyType.ed25519, .p256])
    func aLoginAuthenticatesWithAKeychainKey(_ type: KeyType) throws {
        try login(through: OpenSSHAgentTests(), type)
    }

    /// The agent is non-dumpable, so a keychaind without CAP_SYS_PTRACE cannot see its
    /// executable: with an app told apart by executable in the policy, the agent is still
    /// served, by its uid's rule (docs/security.md, "Callers whose executable is hidden").
    @Test func aLoginWorksThroughTheAgentWithAnExecutablePolicyInForce() throws {
        let daemon = try RunningDaemon(config: """
            admin_uids = [0]
            [[app]]
            id = "python.app"
            uids = [0]
            executables = ["/usr/bin/python3"]
            groups = ["python.app"]
            [[app]]
            id = "root"
            uids = [0]
            groups = ["uid.0"]
            """, launcher: CallerIdentityTests.withoutPtrace)
        try login(through: OpenSSHAgentTests(daemon: daemon), .ed25519)
    }

    func login(through agent: OpenSSHAgentTests, _ type: KeyType) throws {
        let key = try agent.sshKey(type, label: "login-\(type)")
        try withSSHD(through: agent, authorizing: agent.authorizedKey(key)) { port, dir in
            let login = try Self.login(through: agent, port: port)
            #expect(login.status == 0, "\(login.stderr) \((try? String(contentsOfFile: dir + "/sshd.log", encoding: .utf8)) ?? "")")
            #expect(login.text.contains("logged-in-as-\(Self.user)"), "\(login.text) \(login.stderr)")
        }
    }

    /// ssh-add -c: keychaind asks the person at its prompt before each signature (the agent
    /// protocol cannot make ssh ask). A scripted pinentry gives the passcode, then cancels:
    /// the first login goes through, the second is refused, one prompt each.
    @Test func aKeyAddedWithConfirmAsksAtEachLoginAndACancelRefusesIt() throws {
        let prompt = try ChangingPrompt()
        let daemon = try RunningDaemon(config: prompt.config)
        #expect(try daemon.cli(["passcode", "set"], input: bytes(ItemsThatAskFirstTests.passcode + "\n")).status == 0)
        let agent = try OpenSSHAgentTests(daemon: daemon)
        let file = agent.scratch + "/id_confirm"
        _ = try runExecutable("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "confirm-me", "-f", file],
                              environment: ["PATH": "/usr/bin:/bin"], input: [])
        let added = try agent.ssh("ssh-add", ["-c", file])
        #expect(added.status == 0, "\(added.stderr)")
        let key = try #require(try KeychainKey.find(label: "confirm-me", connection: agent.connection).first)
        #expect(key.attributes["accc"] == .string("ak;1"))
        #expect(prompt.count == 0)
        try withSSHD(through: agent, authorizing: agent.authorizedKey(key)) { port, dir in
            try prompt.answer(ItemsThatAskFirstTests.passcode)
            let allowed = try Self.login(through: agent, port: port)
            #expect(allowed.status == 0, "\(allowed.stderr) \((try? String(contentsOfFile: dir + "/sshd.log", encoding: .utf8)) ?? "")")
            #expect(allowed.text.contains("logged-in-as-\(Self.user)"))
            #expect(prompt.count == 1)
            try prompt.answer("cancel")
            let refused = try Self.login(through: agent, port: port)
            #expect(refused.status != 0)
            #expect(!refused.text.contains("logged-in-as"))
            #expect(prompt.count == 2)
            #expect(agent.log.contains("said no"), "\(agent.log)")
        }
        // The prompt named the agent's asker: ssh, by the path the kernel reports.
        #expect(prompt.said.contains("Its reason: an SSH signature for /usr/bin/ssh (pid "), "\(prompt.said)")
    }

    /// A key ssh-add -c sends when the keychain holds it already without confirmation is
    /// refused: adding it back into view would drop the confirmation asked for.
    @Test func confirmCannotBeAddedToAKeyTheKeychainHoldsWithout() throws {
        let agent = try OpenSSHAgentTests()
        let file = agent.scratch + "/id_plain"
        _ = try runExecutable("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "plain", "-f", file],
                              environment: ["PATH": "/usr/bin:/bin"], input: [])
        #expect(try agent.ssh("ssh-add", [file]).status == 0)
        #expect(try agent.ssh("ssh-add", ["-c", file]).status != 0)
        #expect(agent.log.contains("without confirmation"), "\(agent.log)")
    }

    static func login(through agent: OpenSSHAgentTests, port: UInt16) throws -> CLIResult {
        try agent.ssh("ssh", ["-F", "/dev/null", "-o", "IdentityAgent=\(agent.socketPath)", "-o", "BatchMode=yes",
                              "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                              "-o", "PreferredAuthentications=publickey", "-p", String(port),
                              "\(Self.user)@127.0.0.1", "echo logged-in-as-$(id -un)"])
    }

    /// An sshd on loopback that accepts `authorizedKey` for the test user, for the span of `body`.
    func withSSHD(through agent: OpenSSHAgentTests, authorizing authorizedKey: String,
                  _ body: (UInt16, String) throws -> Void) throws {
        try Self.ensureUser()
        let dir = agent.scratch + "/sshd"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "/run/sshd", withIntermediateDirectories: true)
        _ = try runExecutable("/usr/bin/ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", dir + "/host_key"], environment: [:], input: [])
        try (authorizedKey + "\n").write(toFile: dir + "/authorized_keys", atomically: true, encoding: .utf8)
        chmod(agent.scratch, 0o755)
        chmod(dir, 0o755)
        chmod(dir + "/authorized_keys", 0o644)
        let (sshd, port) = try Self.startSSHD(dir) { port in
            """
            ListenAddress 127.0.0.1
            Port \(port)
            HostKey \(dir)/host_key
            PidFile \(dir)/sshd.pid
            AuthorizedKeysFile \(dir)/authorized_keys
            AuthenticationMethods publickey
            PubkeyAuthentication yes
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            AllowUsers \(Self.user)

            """
        }
        defer {
            kill(sshd, SIGTERM)
            var status: Int32 = 0
            waitpid(sshd, &status, 0)
        }
        try body(port, dir)
    }
}

/// keychaind's [prompt] with the scripted pinentry (Tests/SecretServiceScripts/fake_pinentry.py),
/// whose answers a test changes between prompts; its log has one SETDESC per prompt.
struct ChangingPrompt {
    let directory: String

    init() throws {
        var template = Array("/tmp/kcq.XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        directory = String(cString: made)
        try """
            #!/bin/sh
            FAKE_PINENTRY_ANSWERS="$(cat '\(directory)/answers')" FAKE_PINENTRY_LOG='\(directory)/pinentry.log' exec \(SecretServiceScripts.path("fake_pinentry.py"))
            """.write(toFile: directory + "/pinentry", atomically: true, encoding: .utf8)
        chmod(directory + "/pinentry", 0o700)
        try answer("cancel")
    }

    var config: String { "[prompt]\npinentry = \"\(directory)/pinentry\"\ndisplay = \":99\"" }

    /// What each prompt from now on answers: a passcode, or "cancel".
    func answer(_ text: String) throws {
        try text.write(toFile: directory + "/answers", atomically: true, encoding: .utf8)
    }

    var said: String { (try? String(contentsOfFile: directory + "/pinentry.log", encoding: .utf8)) ?? "" }
    var count: Int { said.components(separatedBy: "\n").filter { $0.hasPrefix("SETDESC ") }.count }
}
