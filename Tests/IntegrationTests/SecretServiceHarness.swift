import DBus
import Foundation
import KeychainModel

/// A Secret Service under test: a private bus standing in for the session bus, a real
/// keychaind (RunningDaemon) and the real keychain-secret-service on both.
final class SecretServiceSetup: @unchecked Sendable {
    let bus: PrivateSystemBus
    let daemon: RunningDaemon
    private(set) var bridges: [RunningBridge] = []
    /// Directories removed with the setup.
    var cleanUp: [String] = []

    init(config: String = "", startBridge: Bool = true) throws {
        bus = try PrivateSystemBus()
        daemon = try RunningDaemon(config: config)
        if startBridge { _ = try startedBridge() }
    }

    deinit {
        for directory in cleanUp { try? FileManager.default.removeItem(atPath: directory) }
    }

    var bridge: RunningBridge { bridges[0] }

    /// The environment of a client of this session bus and keychaind.
    var environment: [String: String] {
        ["DBUS_SESSION_BUS_ADDRESS": bus.address, "KEYCHAIN_SOCKET": daemon.socketPath, "PATH": "/usr/bin:/bin",
         "HOME": daemon.root]
    }

    /// Starts a bridge; with `waitForName` (the default), returns once it owns the name.
    func startedBridge(_ arguments: [String] = [], waitForName: Bool = true,
                       environment: [String: String] = [:]) throws -> RunningBridge {
        let bridge = try RunningBridge(self, arguments: arguments, environment: environment)
        bridges.append(bridge)
        if waitForName {
            try waitUntil(timeout: 20, "the bridge to own org.freedesktop.secrets") {
                guard bridge.isRunning else { throw KeychainError(.serviceNotAvailable, "the bridge exited: \(bridge.log)") }
                return try ownerPID(of: "org.freedesktop.secrets") == bridge.pid
            }
        }
        return bridge
    }

    /// The pid of the connection that owns `name` on the bus, or nil.
    func ownerPID(of name: String) throws -> Int32? {
        let connection = try BusConnection(address: bus.address)
        func ask(_ member: String, _ argument: String) throws -> BusMessage {
            try connection.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                interface: "org.freedesktop.DBus", member: member, arguments: [.string(argument)])
        }
        guard let owner = try? ask("GetNameOwner", name).readString() else { return nil }
        // The owner may leave between the two calls (a bridge being replaced with --replace):
        // then nobody we know owns it yet, and the caller's wait asks again (docs/flakes.md).
        guard let pid = try? ask("GetConnectionUnixProcessID", owner).readUInt32() else { return nil }
        return Int32(pid)
    }

    /// Runs Tests/SecretServiceScripts/`script` with Debian's python3 (python3-secretstorage).
    func python(_ script: String, _ arguments: [String] = [], input: [UInt8] = [],
                interpreter: String = "/usr/bin/python3") throws -> CLIResult {
        try runExecutable(interpreter, [SecretServiceScripts.path(script)] + arguments, environment: environment, input: input)
    }

    /// Runs a script and decodes the one JSON object it prints; a failure is thrown with its stderr.
    func pythonJSON(_ script: String, _ arguments: [String] = [], interpreter: String = "/usr/bin/python3") throws -> [String: Any] {
        let result = try python(script, arguments, interpreter: interpreter)
        guard result.status == 0,
              let object = try? JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any] else {
            throw KeychainError(.io, "\(script) \(arguments) exited \(result.status): \(result.stderr) \(result.text)")
        }
        return object
    }
}

enum SecretServiceScripts {
    static func path(_ name: String) -> String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../SecretServiceScripts/\(name)").standardized.path
    }
}

/// keychain-secret-service running on a setup's bus and daemon; stopped when it goes away.
final class RunningBridge: @unchecked Sendable {
    let process = Process()
    let logPath: String

    convenience init(_ setup: SecretServiceSetup, arguments: [String], environment: [String: String]) throws {
        try self.init(daemon: setup.daemon, arguments: arguments, environment: setup.environment.merging(environment) { $1 })
    }

    /// A bridge for `daemon` with exactly `environment` (its bus among it); `asUser` runs it
    /// under another uid through setpriv.
    init(daemon: RunningDaemon, arguments: [String], environment: [String: String], asUser uid: UInt32? = nil) throws {
        logPath = daemon.root + "/bridge-\(UInt32.random(in: 0...UInt32.max)).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let bridgeArguments = ["--socket", daemon.socketPath, "--verbose"] + arguments
        let executable = Binaries.directory + "/keychain-secret-service"
        if let uid {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", executable] + bridgeArguments
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = bridgeArguments
        }
        process.environment = environment
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardError = log
        process.standardOutput = log
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    var pid: Int32 { process.processIdentifier }
    var isRunning: Bool { process.isRunning }
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits (at most `timeout` seconds) for it to exit; its status.
    func exitStatus(timeout: Double = 20) throws -> Int32 {
        try waitUntil(timeout: timeout, "the bridge to exit") { !process.isRunning }
        return process.terminationStatus
    }
}
