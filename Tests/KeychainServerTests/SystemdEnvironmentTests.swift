import Foundation
import KeychainModel
import KeychainProtocol
import Logging
import Testing
@testable import KeychainServer

/// A socket of `type`, bound to a fresh path under /tmp, listening if asked; closed by the caller.
private func unixSocket(_ type: Int32, listening: Bool) -> (fd: Int32, path: String) {
    let path = "/tmp/kcsa-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).sock"
    let fd = socket(AF_UNIX, type, 0)
    var addr = sockaddr_un()
    addr.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &addr.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    _ = withUnsafePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    if listening { listen(fd, 1) }
    return (fd, path)
}

private func activation(fds: String = "1", pid: pid_t = getpid()) -> [String: String] {
    ["LISTEN_FDS": fds, "LISTEN_PID": "\(pid)", "LISTEN_FDNAMES": "keychaind.socket"]
}

private func refusal(_ body: () throws(KeychainError) -> Void) -> KeychainError? {
    do { try body() } catch { return error }
    return nil
}

@Suite("Socket activation (LISTEN_FDS)")
struct SocketActivationTests {
    @Test func withoutListenFDsTheDaemonBindsItsOwnSocket() throws {
        #expect(try SocketActivation.listener(environment: [:]) == nil)
    }

    @Test func aListeningUnixStreamSocketIsServedAndMadeCloseOnExec() throws {
        let s = unixSocket(Int32(SOCK_STREAM.rawValue), listening: true)
        defer { unlink(s.path) }
        // The served socket owns the descriptor from here, and closes it.
        let taken = try #require(try SocketActivation.listener(environment: activation(), descriptor: s.fd))
        defer { taken.close() }
        #expect(taken.fd == s.fd)
        #expect(fcntl(s.fd, F_GETFD) & FD_CLOEXEC != 0)
        #expect(SocketActivation.boundPath(of: taken) == s.path)
    }

    @Test func aSecondSocketNamedCredentialsIsTheCredentialSocket() throws {
        let main = unixSocket(Int32(SOCK_STREAM.rawValue), listening: true)
        let credentials = unixSocket(Int32(SOCK_STREAM.rawValue), listening: true)
        defer { unlink(main.path); unlink(credentials.path) }
        // Two descriptors in a row, as systemd hands them over, in the order of LISTEN_FDNAMES.
        let first: Int32 = 900
        dup2(credentials.fd, first)
        dup2(main.fd, first + 1)
        close(main.fd)
        close(credentials.fd)
        var environment = activation(fds: "2")
        environment["LISTEN_FDNAMES"] = "credentials:keychaind.socket"
        let taken = try SocketActivation.listeners(environment: environment, descriptor: first)
        defer { taken.main?.close(); taken.credentials?.close() }
        #expect(taken.main.flatMap(SocketActivation.boundPath) == main.path)
        #expect(taken.credentials.flatMap(SocketActivation.boundPath) == credentials.path)
    }

    @Test func twoSocketsNeitherNamedCredentialsAreRefused() throws {
        var environment = activation(fds: "2")
        environment["LISTEN_FDNAMES"] = "keychaind.socket:other.socket"
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listeners(environment: environment, descriptor: 1000) }
        #expect(error?.status == .param)
    }

    @Test func variablesMeantForAnotherProcessAreIgnored() throws {
        let s = unixSocket(Int32(SOCK_STREAM.rawValue), listening: true)
        defer { close(s.fd); unlink(s.path) }
        #expect(try SocketActivation.listener(environment: activation(pid: getpid() + 1), descriptor: s.fd) == nil)
        #expect(try SocketActivation.listener(environment: ["LISTEN_FDS": "1"], descriptor: s.fd) == nil)
    }

    @Test func aDescriptorThatIsNotASocketIsRefused() throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listener(environment: activation(), descriptor: ends[0]) }
        #expect(error?.status == .param)
        #expect(error?.message.contains("descriptor \(ends[0]) from the service manager (LISTEN_FDS) is not a socket") == true)
    }

    @Test func aClosedDescriptorIsRefused() throws {
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listener(environment: activation(), descriptor: 1000) }
        #expect(error?.status == .param)
        #expect(error?.message.contains("cannot be used") == true)
    }

    @Test func aDatagramSocketIsRefused() throws {
        let s = unixSocket(Int32(SOCK_DGRAM.rawValue), listening: false)
        defer { close(s.fd); unlink(s.path) }
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listener(environment: activation(), descriptor: s.fd) }
        #expect(error?.message.contains("not a stream socket") == true)
    }

    @Test func aStreamSocketThatIsNotListeningIsRefused() throws {
        let s = unixSocket(Int32(SOCK_STREAM.rawValue), listening: false)
        defer { close(s.fd); unlink(s.path) }
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listener(environment: activation(), descriptor: s.fd) }
        #expect(error?.message.contains("is not listening") == true)
    }

    @Test func anInternetSocketIsRefused() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listener(environment: activation(), descriptor: fd) }
        #expect(error?.message.contains("not a Unix socket") == true)
    }

    @Test(arguments: ["2", "x", "-1"])
    func anythingButOneSocketIsRefused(count: String) throws {
        let error = refusal { () throws(KeychainError) in _ = try SocketActivation.listener(environment: activation(fds: count), descriptor: 1000) }
        #expect(error?.status == .param)
    }

    @Test func zeroSocketsMeansBinding() throws {
        #expect(try SocketActivation.listener(environment: activation(fds: "0"), descriptor: 1000) == nil)
    }
}

@Suite("Paths and overrides from the environment")
struct DaemonEnvironmentTests {
    @Test func systemdDirectoriesAreTheDefaultsTakingTheFirstOfAList() {
        let env = DaemonEnvironment(["STATE_DIRECTORY": "/var/lib/keychaind:/var/lib/other",
                                     "RUNTIME_DIRECTORY": "/run/keychaind:/run/x"], euid: 1000)
        #expect(env.stateDirectory == "/var/lib/keychaind")
        #expect(env.socketPath == "/run/keychaind/keychaind.sock")
    }

    @Test func withoutThemTheBuiltInDefaultsStay() {
        let env = DaemonEnvironment([:], euid: 1000)
        #expect(env.stateDirectory == DefaultPaths.stateDirectory)
        #expect(env.socketPath == DefaultPaths.socketPath)
    }

    @Test func theConfigFileIsFoundWhereEachKindOfDaemonKeepsIt() {
        #expect(DaemonEnvironment(["CONFIGURATION_DIRECTORY": "/etc/keychaind:/etc/x"], euid: 998).configFile
                == ConfigFile(path: "/etc/keychaind/keychaind.toml", required: false))
        #expect(DaemonEnvironment([:], euid: 0).configFile == ConfigFile(path: "/etc/keychaind/keychaind.toml", required: false))
        #expect(DaemonEnvironment(["XDG_CONFIG_HOME": "/home/a/.cfg", "HOME": "/home/a"], euid: 1000).configFile
                == ConfigFile(path: "/home/a/.cfg/keychaind/keychaind.toml", required: false))
        #expect(DaemonEnvironment(["HOME": "/home/a"], euid: 1000).configFile
                == ConfigFile(path: "/home/a/.config/keychaind/keychaind.toml", required: false))
        #expect(DaemonEnvironment(["KEYCHAIND_CONFIG": "/srv/k.toml", "CONFIGURATION_DIRECTORY": "/etc/keychaind"], euid: 0).configFile
                == ConfigFile(path: "/srv/k.toml", required: true))
    }

    @Test func anAbsentDefaultConfigIsNotReadButAnAbsentNamedOneIs() {
        #expect(!ConfigFile(path: "/nonexistent/keychaind.toml", required: false).shouldRead)
        #expect(ConfigFile(path: "/nonexistent/keychaind.toml", required: true).shouldRead)
    }

    @Test func variablesOverrideTheFile() throws {
        let file = try DaemonConfig.parse("state_dir = \"/file/state\"\nsocket = \"/file/s.sock\"\nlog_level = \"warning\"")
        let env = DaemonEnvironment(["KEYCHAIND_STATE_DIR": "/env/state", "KEYCHAIND_SOCKET": "/env/s.sock",
                                     "KEYCHAIND_LOG_LEVEL": "debug"])
        let config = try env.overriding(file)
        #expect(config.stateDirectory == "/env/state")
        #expect(config.socketPath == "/env/s.sock")
        #expect(config.logLevel == "debug")
    }

    @Test func anEmptyVariableCountsAsUnset() throws {
        let file = try DaemonConfig.parse("socket = \"/file/s.sock\"")
        #expect(try DaemonEnvironment(["KEYCHAIND_SOCKET": ""]).overriding(file).socketPath == "/file/s.sock")
    }

    @Test func anUnknownLogLevelInTheEnvironmentIsRefusedNamingTheVariable() {
        let error = refusal { () throws(KeychainError) in _ = try DaemonEnvironment(["KEYCHAIND_LOG_LEVEL": "loud"]).overriding(DaemonConfig()) }
        #expect(error?.status == .param)
        #expect(error?.message.contains("KEYCHAIND_LOG_LEVEL") == true)
    }

    @Test func flagsWinOverTheFileAndTheFileOverServiceDirectories() throws {
        let env = DaemonEnvironment(["STATE_DIRECTORY": "/svc/state", "RUNTIME_DIRECTORY": "/svc/run"])
        let file = try DaemonConfig.parse("state_dir = \"/file/state\"")
        let fromFile = file.serverConfiguration(stateDirectory: nil, socket: nil, defaults: env)
        #expect(fromFile.store.stateDirectory == "/file/state")
        #expect(fromFile.socketPath == "/svc/run/keychaind.sock")
        let fromFlags = file.serverConfiguration(stateDirectory: "/flag/state", socket: "/flag/s.sock", defaults: env)
        #expect(fromFlags.store.stateDirectory == "/flag/state")
        #expect(fromFlags.socketPath == "/flag/s.sock")
    }

    @Test func aDeviceKeyCredentialIsUsedOnlyWhenSystemdPlacedOne() throws {
        let dir = "/tmp/kccred-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        mkdir(dir, 0o700)
        defer { unlink(dir + "/device.key"); rmdir(dir) }
        #expect(DaemonEnvironment(["CREDENTIALS_DIRECTORY": dir]).deviceKeyCredential == nil)
        FileManager.default.createFile(atPath: dir + "/device.key", contents: Data(count: 32))
        #expect(DaemonEnvironment(["CREDENTIALS_DIRECTORY": dir]).deviceKeyCredential == dir + "/device.key")
        let server = DaemonConfig().serverConfiguration(stateDirectory: "/s", socket: "/s.sock",
                                                         defaults: DaemonEnvironment(["CREDENTIALS_DIRECTORY": dir]))
        #expect(server.store.deviceKeyPath == dir + "/device.key")
        #expect(server.store.stateDeviceKeyPath == "/s/device.key")
    }
}

@Suite("Log lines for journald")
struct JournalLogTests {
    private func pipeEnds() -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        _ = pipe(&ends)
        return (ends[0], ends[1])
    }

    private func identity(_ fd: Int32) -> String {
        var st = stat()
        fstat(fd, &st)
        return "\(st.st_dev):\(st.st_ino)"
    }

    @Test func journalStreamMatchesOnlyTheStreamItNames() {
        let a = pipeEnds(), b = pipeEnds()
        defer { [a.read, a.write, b.read, b.write].forEach { close($0) } }
        #expect(JournalStream.isConnected(a.write, environment: ["JOURNAL_STREAM": identity(a.write)]))
        #expect(!JournalStream.isConnected(b.write, environment: ["JOURNAL_STREAM": identity(a.write)]))
        #expect(!JournalStream.isConnected(a.write, environment: [:]))
        #expect(!JournalStream.isConnected(a.write, environment: ["JOURNAL_STREAM": "garbage"]))
    }

    @Test func eachLineStartsWithItsPriorityAndCarriesNoTimestamp() throws {
        let p = pipeEnds()
        defer { close(p.read) }
        var handler = JournalLogHandler(label: "keychaind", fd: p.write)
        handler.logLevel = .debug
        let logger = Logger(label: "keychaind", factory: { _ in EscapingLogHandler(handler) })
        logger.warning("disk \("almost")\nfull", metadata: ["uid": "1000"])
        logger.info("ready")
        logger.critical("cannot start")
        close(p.write)
        var text = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(p.read, &buffer, buffer.count)
            if n <= 0 { break }
            text += buffer[0..<n]
        }
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n")
        #expect(lines == ["<4>keychaind: uid=1000 disk almost\\nfull", "<6>keychaind: ready", "<2>keychaind: cannot start"])
    }
}
