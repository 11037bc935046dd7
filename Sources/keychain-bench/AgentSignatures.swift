// `keychain-bench --ssh-agent N`: signature latency through `keychain ssh-agent` beside
// OpenSSH's own ssh-agent, in the same run and in turn, for Ed25519 and P-256 (docs/performance.md).
import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import SSHAgent

/// A process started with posix_spawn and stopped by pid. Not Foundation's Process: an agent
/// that closes its inherited descriptors looks to Process like one that exited.
struct Spawned {
    let pid: pid_t

    init?(_ path: String, _ arguments: [String], environment: [String: String] = [:]) {
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = ProcessInfo.processInfo.environment.merging(environment) { $1 }
            .map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var pid: pid_t = 0
        guard posix_spawn(&pid, path, &actions, nil, argv, envp) == 0 else { return nil }
        self.pid = pid
    }

    /// Runs to the end; whether it succeeded.
    static func run(_ path: String, _ arguments: [String], environment: [String: String] = [:]) -> Bool {
        guard let p = Spawned(path, arguments, environment: environment) else { return false }
        return p.wait() == 0
    }

    func wait() -> Int32 {
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        return status
    }

    func stop() {
        kill(pid, SIGTERM)
        _ = wait()
    }
}

/// One agent connection and a key it holds, asked for signatures one at a time.
struct AgentSigner {
    let name: String
    let connection: UnixSocket
    let key: SSHPublicKey

    func sign(_ data: [UInt8]) -> Bool {
        var request = SSHWriter()
        request.byte(13)
        request.string(key.blob)
        request.string(data)
        request.uint32(0)
        guard (try? connection.writeAll(AgentFrame.frame(request.bytes))) != nil,
              let answer = try? AgentFrame.read(from: connection),
              case .signature? = try? AgentResponse(message: Array(answer)) else { return false }
        return true
    }

    /// The agent's key of `type`, from its identities answer.
    static func connect(_ name: String, path: String, type: SSHKeyType) -> AgentSigner? {
        guard let connection = try? UnixSocket.connect(path: path),
              (try? connection.writeAll(AgentFrame.frame([11]))) != nil,
              let answer = try? AgentFrame.read(from: connection),
              case .identities(let list)? = try? AgentResponse(message: Array(answer)),
              let key = list.first(where: { $0.key.type == type })?.key else { return nil }
        return AgentSigner(name: name, connection: connection, key: key)
    }
}

func waitForSocket(_ path: String) -> Bool {
    for _ in 0..<500 {
        if let s = try? UnixSocket.connect(path: path) {
            s.close()
            return true
        }
        usleep(10_000)
    }
    return false
}

func sshAgentFigures(signatures: Int, socket: String) {
    let binaries = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0] as String)
    let keychain = (binaries as NSString).deletingLastPathComponent + "/keychain"
    guard FileManager.default.isExecutableFile(atPath: keychain), FileManager.default.isExecutableFile(atPath: "/usr/bin/ssh-agent") else {
        print("ssh-agent  needs the keychain binary beside keychain-bench (swift build -c release --product keychain) and OpenSSH's ssh-agent")
        return
    }
    let dir = "/tmp/kcb-ssh.\(getpid())"
    mkdir(dir, 0o700)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    let connection = KeychainConnection(socketPath: socket, busyPollMicroseconds: options.clientPollMicroseconds)
    let keys: [(SSHKeyType, KeychainKey)]
    do {
        keys = [(.ed25519, try KeychainKey.generate(.ed25519, label: "bench-ssh-ed25519", applicationTag: KeychainKey.sshTag, connection: connection)),
                (.ecdsaP256, try KeychainKey.generate(.p256, label: "bench-ssh-p256", applicationTag: KeychainKey.sshTag, connection: connection))]
    } catch {
        print("ssh-agent  cannot make the keychain's SSH keys: \(error)")
        return
    }
    defer { for (_, key) in keys { try? key.delete() } }

    let ours = dir + "/keychain/agent.sock", theirs = dir + "/openssh.sock"
    guard let keychainAgent = Spawned(keychain, ["ssh-agent", "--foreground", "--listen", ours], environment: ["KEYCHAIN_SOCKET": socket]) else { return }
    defer { keychainAgent.stop() }
    guard let opensshAgent = Spawned("/usr/bin/ssh-agent", ["-D", "-a", theirs]) else { return }
    defer { opensshAgent.stop() }
    guard waitForSocket(ours), waitForSocket(theirs) else {
        print("ssh-agent  an agent did not start")
        return
    }
    for (type, bits) in [("ed25519", "256"), ("ecdsa", "256")] {
        let file = dir + "/id_" + type
        guard Spawned.run("/usr/bin/ssh-keygen", ["-q", "-t", type, "-b", bits, "-N", "", "-f", file]),
              Spawned.run("/usr/bin/ssh-add", ["-q", file], environment: ["SSH_AUTH_SOCK": theirs]) else {
            print("ssh-agent  cannot give OpenSSH's agent a \(type) key")
            return
        }
    }

    let data = [UInt8](repeating: 0x5a, count: 128)  // about a userauth request's size
    for (type, key) in keys {
        guard let mine = AgentSigner.connect("keychain ssh-agent", path: ours, type: type),
              let openssh = AgentSigner.connect("openssh ssh-agent", path: theirs, type: type) else {
            print("ssh-agent  an agent does not list a \(type.rawValue) key")
            return
        }
        let algorithm: KeySigningAlgorithm = type == .ed25519 ? .ed25519 : .ecdsaMessageX962SHA256
        // In turn, one of each per round, so that the machine's noise falls on all alike.
        var times: [[UInt64]] = [[], [], []]
        for _ in 0..<signatures {
            var t0 = now()
            guard mine.sign(data) else { print("ssh-agent  keychain ssh-agent refused to sign"); return }
            times[0].append(now() - t0)
            t0 = now()
            guard openssh.sign(data) else { print("ssh-agent  OpenSSH's ssh-agent refused to sign"); return }
            times[1].append(now() - t0)
            t0 = now()
            guard (try? key.sign(data, algorithm: algorithm)) != nil else { print("ssh-agent  KeychainKey.sign failed"); return }
            times[2].append(now() - t0)
        }
        let medians = times.map { percentile($0.sorted(), 0.5) }
        let p99 = times.map { percentile($0.sorted(), 0.99) }
        let name = type == .ed25519 ? "ed25519" : "p256"
        print(String(format: "sign   %-7@ keychain ssh-agent    n=%-6d p50=%7.1fus  p99=%7.1fus  ratio to ssh-agent=%.2f",
                     name, signatures, medians[0], p99[0], medians[0] / medians[1]))
        print(String(format: "sign   %-7@ openssh ssh-agent     n=%-6d p50=%7.1fus  p99=%7.1fus",
                     name, signatures, medians[1], p99[1]))
        print(String(format: "sign   %-7@ KeychainKey.sign      n=%-6d p50=%7.1fus  p99=%7.1fus",
                     name, signatures, medians[2], p99[2]))
        fflush(nil)
        mine.connection.close()
        openssh.connection.close()
    }
}
