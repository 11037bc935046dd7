import ArgumentParser
import Foundation
import KeychainModel
import KeychainProtocol
import KeychainServer
import KeychainStore
import Logging

@main
struct Keychaind: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keychaind",
        abstract: "The keychain daemon: serves SecItem calls over a Unix socket.",
        discussion: """
        First run for a user: `keychain init` starts keychaind (the user unit where systemd runs one) \
        and sets how the keychain unlocks, with the login password or a passcode. \
        Runs in the foreground and logs to stderr (with syslog priorities when it is journald's stream). \
        Without flags: as root, state in /var/lib/keychaind and socket /run/keychaind/keychaind.sock; \
        otherwise $XDG_DATA_HOME/keychaind and $XDG_RUNTIME_DIR/keychaind.sock (or /tmp/keychaind-UID/); \
        under systemd, $STATE_DIRECTORY and $RUNTIME_DIRECTORY. The config file without --config: \
        $KEYCHAIND_CONFIG, else $CONFIGURATION_DIRECTORY/keychaind.toml, /etc/keychaind/keychaind.toml \
        (root) or $XDG_CONFIG_HOME/keychaind/keychaind.toml, each read only if present. \
        KEYCHAIND_STATE_DIR, KEYCHAIND_SOCKET and KEYCHAIND_LOG_LEVEL override the file; flags override \
        both. A socket passed by systemd (LISTEN_FDS) is served instead of binding one; a device key in \
        $CREDENTIALS_DIRECTORY/device.key is used instead of the state directory's. SIGTERM or SIGINT \
        stops it cleanly; SIGHUP reloads the config file; SIGUSR1 locks. With $NOTIFY_SOCKET set \
        (systemd Type=notify) it reports READY=1, RELOADING=1 and STOPPING=1 there. Exit status 78 \
        (EX_CONFIG): the flags, the environment or the config file are wrong.
        """,
        version: KeychainVersion.current)

    @Option(name: .customLong("state-dir"), help: "Directory for device.key and keychain.db (created 0700).")
    var stateDirectory: String?

    @Option(help: "Path of the Unix socket to serve.")
    var socket: String?

    @Option(help: "Config file (see Config/keychaind.toml); without it, the default one is read if present.")
    var config: String?

    @Flag(name: .customLong("sync-network"), help: "Print the systemd drop-in that opens the system unit's network for the config's [sync] database server alone (IPAddressAllow=), and exit: write it to /etc/systemd/system/keychaind.service.d/sync-network.conf.")
    var syncNetwork = false

    @Flag(help: "Start in the background and return once the socket serves, printing the daemon's pid (for scripts and shells; systemd units run it in the foreground).")
    var background = false

    /// EX_CONFIG (sysexits.h): the unit's RestartPreventExitStatus= names it, so that a config
    /// that cannot work is not restarted in a loop.
    static let configurationExitStatus: Int32 = 78

    /// A config file or variable that cannot work: its message alone, without the usage block
    /// that bad flags get (the flags were right).
    struct ConfigurationError: Error {
        let message: String
    }

    /// ArgumentParser's own main, except that bad flags and a bad config exit with
    /// EX_CONFIG rather than EX_USAGE.
    static func main() {
        var command: any ParsableCommand
        do {
            command = try parseAsRoot()
        } catch {
            guard exitCode(for: error) == .validationFailure else { exit(withError: error) }
            FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
            Foundation.exit(configurationExitStatus)
        }
        do {
            try command.run()
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("keychaind: \(error.message)\n".utf8))
            Foundation.exit(configurationExitStatus)
        } catch {
            exit(withError: error)
        }
    }

    func run() throws {
        if background {
            BackgroundStart.run(arguments: CommandLine.arguments.dropFirst().filter { $0 != "--background" })
        }
        DaemonProcess.ensureBacktracesDisabled()
        let environment = DaemonEnvironment(ProcessInfo.processInfo.environment)
        let file = config.map { ConfigFile(path: $0, required: true) } ?? environment.configFile
        let loadedPath = file.shouldRead ? file.path : nil
        let daemonConfig: DaemonConfig
        do {
            daemonConfig = try environment.overriding(loadedPath.map(Self.load) ?? DaemonConfig())
        } catch {
            throw ConfigurationError(message: "\(error)")
        }
        if syncNetwork {
            do {
                let text = try SyncNetworkDropIn.text(for: daemonConfig, source: loadedPath ?? file.path)
                print(text ?? "# [sync] database names only Unix sockets: the unit needs no network, and no drop-in.", terminator: text == nil ? "\n" : "")
                return
            } catch {
                throw ConfigurationError(message: "\(error)")
            }
        }
        // Refusals name the file that would change them, even one not written yet.
        let source = loadedPath ?? "\(file.path) (absent, so the built-in defaults are in force: create it, then restart keychaind)"
        var server = daemonConfig.serverConfiguration(stateDirectory: stateDirectory, socket: socket,
                                                      source: source, defaults: environment)
        if environment.variables["KEYCHAIND_INSECURE_FAST_KDF"] == "1" {
            server.store.argon2 = .testingOnly  // test suites only (README, "Settings for tests")
        }
        let level = Logger.Level(rawValue: daemonConfig.logLevel) ?? .info
        let toJournal = JournalStream.isConnected(environment: environment.variables)
        LoggingSystem.bootstrap { label in
            let inner: any LogHandler = toJournal ? JournalLogHandler(label: label) : StreamLogHandler.standardError(label: label)
            var handler = EscapingLogHandler(inner)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "keychaind")
        // A socket the service manager handed over is served in place of any configured path.
        let handed: UnixSocket?
        let handedCredentials: UnixSocket?
        do {
            (handed, handedCredentials) = try SocketActivation.listeners(environment: environment.variables)
        } catch {
            logger.critical("cannot start: \(error)")
            throw ExitCode(Self.configurationExitStatus)
        }
        SocketActivation.forgetVariables()
        if let handed {
            server.socketPath = SocketActivation.boundPath(of: handed) ?? "the socket from the service manager"
        }
        if let credential = server.store.deviceKeyCredential {
            logger.info("device key from the credential \(credential)")
        }
        try DaemonProcess.harden()
        // Before any thread starts, so that every thread inherits the blocked signals.
        var signals = SignalEvents()
        var observers: [any ReadinessObserver] = []
        if let notification = ServiceNotification(environment: environment.variables) {
            observers.append(notification)
        }
        let lifecycle = DaemonLifecycle(configFile: file, loadConfig: Self.load, observers: observers, logger: logger)
        let daemon: KeychainServer
        do {
            if handed == nil && socket == nil && daemonConfig.socketPath == nil {
                try DaemonProcess.prepareSocketDirectory(for: server.socketPath)
            }
            daemon = try KeychainServer(configuration: server, listener: handed, credentialListener: handedCredentials, logger: logger)
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
        try DaemonConfig.load(path: path)
    }
}
