import ArgumentParser
import Foundation
import KeychainModel
import KeychainServer
import KeychainStore
import Logging

@main
struct Keychaind: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keychaind",
        abstract: "The keychain daemon: serves SecItem calls over a Unix socket.",
        discussion: """
        Runs in the foreground and logs to stderr. Without flags: as root, state in /var/lib/keychaind \
        and socket /run/keychaind/keychaind.sock; otherwise $XDG_DATA_HOME/keychaind and \
        $XDG_RUNTIME_DIR/keychaind.sock (or /tmp/keychaind-UID/). SIGTERM or SIGINT stops it cleanly; \
        SIGHUP reloads --config; SIGUSR1 locks. With $NOTIFY_SOCKET set (systemd Type=notify) it reports \
        READY=1, RELOADING=1 and STOPPING=1 there.
        """,
        version: KeychainVersion.current)

    @Option(name: .customLong("state-dir"), help: "Directory for device.key and keychain.db (created 0700).")
    var stateDirectory: String?

    @Option(help: "Path of the Unix socket to serve.")
    var socket: String?

    @Option(help: "Config file (see Config/keychaind.toml).")
    var config: String?

    func run() throws {
        DaemonProcess.ensureBacktracesDisabled()
        var daemonConfig = DaemonConfig()
        if let path = config {
            do {
                daemonConfig = try Self.load(path)
            } catch {
                throw ValidationError("\(error)")
            }
        }
        var server = daemonConfig.serverConfiguration(stateDirectory: stateDirectory, socket: socket,
                                                      source: config ?? "the built-in defaults")
        if ProcessInfo.processInfo.environment["KEYCHAIND_INSECURE_FAST_KDF"] == "1" {
            server.store.argon2 = .testingOnly  // test suites only (README, "Settings for tests")
        }
        let level = Logger.Level(rawValue: daemonConfig.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = EscapingLogHandler(StreamLogHandler.standardError(label: label))
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "keychaind")
        try DaemonProcess.harden()
        // Before any thread starts, so that every thread inherits the blocked signals.
        var signals = SignalEvents()
        var observers: [any ReadinessObserver] = []
        if let notification = ServiceNotification(environment: ProcessInfo.processInfo.environment) {
            observers.append(notification)
        }
        let lifecycle = DaemonLifecycle(configPath: config, loadConfig: Self.load, observers: observers, logger: logger)
        let daemon: KeychainServer
        do {
            if socket == nil && daemonConfig.socketPath == nil {
                try DaemonProcess.prepareSocketDirectory(for: server.socketPath)
            }
            daemon = try KeychainServer(configuration: server, logger: logger)
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode.failure
        }
        // After SignalEvents: the watcher's thread inherits the blocked signals.
        SessionLockWatcher.start(daemonConfig.lockOnSessionEvents, uid: getuid(), logger: logger) {
            daemon.lock(reason: $0)
        }
        // A stop signal that came while the store opened waits, pending, for the lifecycle:
        // the daemon then starts and stops at once, removing its socket.
        lifecycle.run(daemon, events: &signals)
    }
}

extension Keychaind {
    /// Reads and validates a config file; the error names the file and the line.
    static func load(_ path: String) throws -> DaemonConfig {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw KeychainError(.io, "cannot read config file \(path)")
        }
        do {
            return try DaemonConfig.parse(text)
        } catch {
            throw KeychainError(.param, "\(path): \(error)")
        }
    }
}
