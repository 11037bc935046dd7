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
        $XDG_RUNTIME_DIR/keychaind.sock (or /tmp/keychaind-UID/). SIGTERM or SIGINT stops it cleanly.
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
        let running = RunningServer()
        DaemonProcess.watchSignals(onStop: { signal in
            logger.info("signal \(signal): stopping")
            running.stop()
        }, onLock: {
            running.lock(reason: "SIGUSR1 from the host")
        }, onReload: { [config] in
            guard let path = config else {
                logger.notice("SIGHUP: no --config file to reload")
                return
            }
            do {
                running.reload(try Self.load(path), source: path)
            } catch {
                logger.error("config reload failed, keeping the running one: \(error)")
            }
        })
        do {
            if socket == nil && daemonConfig.socketPath == nil {
                try DaemonProcess.prepareSocketDirectory(for: server.socketPath)
            }
            let daemon = try KeychainServer(configuration: server, logger: logger)
            running.set(daemon)
            daemon.run()
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode.failure
        }
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

/// Lets the signal thread reach the server, which exists only after the signals are blocked.
final class RunningServer: @unchecked Sendable {
    private let lock = NSLock()
    private var server: KeychainServer?
    private var stopRequested = false

    func set(_ s: KeychainServer) {
        lock.lock()
        server = s
        let stop = stopRequested
        lock.unlock()
        if stop { s.shutdown() }
    }

    func reload(_ config: DaemonConfig, source: String) {
        lock.lock()
        let s = server
        lock.unlock()
        s?.reload(config, source: source)
    }

    func lock(reason: String) {
        lock.lock()
        let s = server
        lock.unlock()
        s?.lock(reason: reason)
    }

    /// Before the server exists (it binds its socket in init, so a client may already have
    /// seen it), the request is remembered and `set` acts on it: the socket is still removed.
    func stop() {
        lock.lock()
        stopRequested = true
        let s = server
        lock.unlock()
        s?.shutdown()
    }
}
