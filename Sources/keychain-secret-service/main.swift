#if canImport(Glibc)
import Glibc
#endif
import ArgumentParser
import CSystemShim
import DBus
import Foundation
import KeychainClient
import SecretService

/// The thin main of the Secret Service bridge (docs/secret-service.md).
struct SecretServiceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keychain-secret-service",
        abstract: "Serves the freedesktop Secret Service (org.freedesktop.secrets) on the session bus from keychaind.",
        discussion: """
        Connects to keychaind like any client (--socket, else $KEYCHAIN_SOCKET, else the default path) and to \
        the session bus ($DBUS_SESSION_BUS_ADDRESS, else $XDG_RUNTIME_DIR/bus), then owns org.freedesktop.secrets. \
        If another program owns it, it names that program and exits with status 2, unless --replace is given \
        and the owner allows replacement. Exits with 0 when another bridge takes the name over, and with 1 when \
        keychaind or the bus goes away.
        """,
        version: KeychainVersion.current)

    @Option(help: "keychaind's socket (default: $KEYCHAIN_SOCKET, else the default path).")
    var socket: String?

    @Option(name: .customLong("trust-uid"), help: "Also talk to a keychaind running as this uid or user (default: $KEYCHAIN_TRUST_UID).")
    var trustUID: String?

    @Flag(help: "Take org.freedesktop.secrets over from its owner, if it allows replacement (another bridge does, gnome-keyring 42 does not).")
    var replace = false

    @Option(help: "Class of new items: ck (readable from the first unlock until logout, like a login keyring; the default) or ak (only while unlocked).")
    var protection = "ck"

    @Option(help: "The pinentry program that asks for the passcode when a client unlocks (default: pinentry on PATH).")
    var pinentry: String?

    @Option(help: "Items created through the bridge ask the person before any read: presence (accc userPresence) or passcode (devicePasscode); keychaind's prompt asks, naming the reading program (default: none).")
    var require: String?

    @Flag(name: .customLong("no-portal"), help: "Do not serve the desktop portal's Secret backend (org.freedesktop.impl.portal.desktop.keychain).")
    var noPortal = false

    @Flag(help: "Also log routine events (sessions closed as their connection leaves the bus).")
    var verbose = false

    @Flag(help: "Let the session bus start this bridge on demand for this user: writes its D-Bus activation files into $XDG_DATA_HOME/dbus-1/services (searched before gnome-keyring's), then exits.")
    var enable = false

    @Flag(help: "Undo --enable: removes those activation files (and the autostart entry hiding gnome-keyring's), then exits.")
    var disable = false

    @Flag(name: .customLong("import"), help: "Copy every collection and item of the program that owns org.freedesktop.secrets now (gnome-keyring, KWallet, KeePassXC) into keychaind, then print what was imported, skipped and failed; run again, it adds nothing and updates what changed. With --replace, then also --enable and take the name over.")
    var importItems = false

    @Flag(name: .customLong("dry-run"), help: "With --import: list what would be imported, write nothing.")
    var dryRun = false

    static let nameTakenExitStatus: Int32 = 2

    /// --require's accc flags: userPresence (1) or devicePasscode (16); 0 without it.
    static func accessFlags(_ require: String?) -> UInt32? {
        switch require {
        case nil: 0
        case "presence": AccessControl.Flag.userPresence
        case "passcode": AccessControl.Flag.devicePasscode
        default: nil
        }
    }

    func validate() throws {
        guard protection == "ck" || protection == "ak" else { throw ValidationError("--protection is ck or ak") }
        guard require == nil || Self.accessFlags(require) != nil else { throw ValidationError("--require is presence or passcode") }
        guard require == nil || !importItems else { throw ValidationError("--require is for the bridge, not --import") }
        guard !(enable && disable) else { throw ValidationError("--enable and --disable exclude each other") }
        guard !dryRun || importItems else { throw ValidationError("--dry-run goes with --import") }
        guard !(importItems && (enable || disable)) else { throw ValidationError("--import excludes --enable and --disable (--import --replace enables)") }
    }

    func run() throws {
        if enable || disable { return changeActivation() }
        ensureBacktracesDisabled()
        if importItems { return importFromProvider() }
        BridgeLog.verbose.store(verbose, ordering: .relaxed)
        let trust = try trustUID.map { (uid) throws(KeychainError) in try ServerTrust.resolve(uid) }
        let keychain = KeychainConnection(socketPath: socket, trust: trust)
        // Unlock prompts wait on their own connection, so that calls go on meanwhile; a read of an
        // item that asks first waits there while the person types (up to 5 minutes).
        let promptKeychain = KeychainConnection(socketPath: socket, timeoutMs: 300_000, trust: trust)
        do {
            // Connect before turning dumpable off: keychaind reads our executable at accept.
            _ = try keychain.status()
            _ = try promptKeychain.status()
        } catch where error.status == .serviceNotAvailable {
            fail(error.message)  // it names the socket and what to do itself
        } catch {
            fail("keychaind at \(keychain.socketPath) refused the bridge's status call: \(error.message)")
        }
        let changes: ChangeSubscription
        do {
            try SecretServiceBridge.checkKeychaindAcceptsBridge(keychain)
            // keychaind reads the subscriber's executable as it connects: before turning dumpable off.
            changes = try keychain.subscribeToChanges()
        } catch {
            fail(error.message)
        }
        guard csystem_harden_process() == 0 else { fail("cannot make the process non-dumpable: \(String(cString: strerror(errno)))") }
        signal(SIGPIPE, SIG_IGN)
        do {
            let bus = try BusConnection(.user)
            let bridge = try SecretServiceBridge(bus: bus, keychain: keychain, changes: changes, protection: protection,
                                                 newItemAccessFlags: Self.accessFlags(require) ?? 0,
                                                 promptKeychain: promptKeychain, pinentry: pinentry)
            try bridge.serve()
            if !noPortal { try bridge.servePortal() }
            if case .taken(let message) = try NameClaim.claim(SecretServiceBridge.busName, on: bus, replace: replace) {
                BridgeLog.error(message)
                Foundation.exit(Self.nameTakenExitStatus)
            }
            // The portal backend is a second service: another owner of its name does not stop the first.
            if !noPortal, case .taken(let message) = try NameClaim.claim(SecretServiceBridge.portalBusName, on: bus, replace: replace) {
                BridgeLog.error("\(message); serving the Secret Service without the portal backend")
            }
            try bridge.run()
            BridgeLog.info("another program took \(SecretServiceBridge.busName); exiting")
        } catch {
            fail(error.message)
        }
    }

    /// --enable / --disable: the activation files, the session bus told to read them, and a
    /// word on what happens next.
    private func changeActivation() {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        let environment = ProcessInfo.processInfo.environment
        do {
            let files = try ActivationFiles(executable: executable, environment: environment)
            if disable {
                let removed = try files.disable()
                print(removed.isEmpty ? "nothing to remove in \(files.userDirectory)" : removed.map { "removed \($0)" }.joined(separator: "\n"))
                if !removed.isEmpty { reloadSessionBus() }
                return
            }
            // The bus starts the bridge with its own environment, not this shell's: the file
            // names the socket this shell's clients use, unless that is the default and the
            // installed user unit (which uses the default too) can be started instead.
            // A uid to trust goes in as a number: a user name resolved now, refused now if unknown.
            let trusted = try ServerTrust.resolve(trustUID).named
            let usesDefault = socket == nil && (environment["KEYCHAIN_SOCKET"] ?? "").isEmpty && trusted == nil
            let written: String? = usesDefault && files.shippedDirectory != nil ? nil : KeychainConnection(socketPath: socket).socketPath
            for path in try files.enable(socket: written, trustedUID: trusted) { print("wrote \(path)") }
            if let written {
                let trusting = trusted.map { " --trust-uid \($0)" } ?? ""
                print("the session bus starts \(executable) --socket \(written)\(trusting) when a client first asks for \(SecretServiceBridge.busName)")
            } else {
                print("the session bus starts the systemd user unit keychain-secret-service.service (keychaind's default socket) when a client first asks for \(SecretServiceBridge.busName)")
                // The user manager may not have read the unit yet (dpkg reloads the system manager only).
                _ = try? runQuietly("/usr/bin/systemctl", ["--user", "daemon-reload"])
            }
            reloadSessionBus()
            if let bus = try? BusConnection(.user), let owner = NameClaim.currentOwner(of: SecretServiceBridge.busName, on: bus),
               !owner.contains("keychain-secret-service") {
                print("\(SecretServiceBridge.busName) is owned now by \(owner): clients reach the bridge after you log out and in again, or at once with keychain-secret-service --replace")
            }
            // xdg-desktop-portal 1.16 reads portal files from /usr/share alone, which a user
            // cannot write; GNOME's (gnome-keyring.portal) names org.freedesktop.secrets, which
            // the bridge answers too (docs/secret-service.md, "The portal backend").
            print("sandboxed apps (the desktop portal): on GNOME, gnome-keyring.portal sends them to \(SecretServiceBridge.busName), so to keychaind while this bridge owns it; elsewhere see docs/secret-service.md, \"Choosing the backend\"")
        } catch {
            fail(error.message)
        }
    }

    /// --import: the provider's items into keychaind, the summary printed; with --replace and
    /// nothing failed, the bridge enabled and started in this process's place to take the name.
    private func importFromProvider() {
        let trust: ServerTrust?
        do {
            trust = try trustUID.map { (uid) throws(KeychainError) in try ServerTrust.resolve(uid) }
        } catch {
            fail(error.message)
        }
        let keychain = KeychainConnection(socketPath: socket, trust: trust)
        let summary: ImportSummary
        do {
            try SecretServiceBridge.checkKeychaindAcceptsBridge(keychain)
            summary = try SecretServiceImport(keychain: keychain, protection: protection, dryRun: dryRun).run(bus: try BusConnection(.user))
        } catch {
            fail(error.message)
        }
        print(summary.report)
        guard summary.failed.isEmpty else {
            if replace { print("not taking \(SecretServiceBridge.busName) over: fix what failed and run --import --replace again (what was imported stays)") }
            Foundation.exit(1)
        }
        guard replace, !dryRun else { return }
        changeActivation()
        fflush(nil)  // the output so far, before exec replaces this process
        // This process becomes the bridge, taking the name from the provider it read.
        var arguments = [CommandLine.arguments[0], "--replace", "--protection", protection]
        if let socket { arguments += ["--socket", socket] }
        if let trustUID { arguments += ["--trust-uid", trustUID] }
        if let pinentry { arguments += ["--pinentry", pinentry] }
        if noPortal { arguments.append("--no-portal") }
        if verbose { arguments.append("--verbose") }
        let argv = arguments.map { strdup($0) } + [nil]
        execv("/proc/self/exe", argv)
        fail("cannot start the bridge: \(String(cString: strerror(errno)))")
    }

    /// Tells the running session bus to read the activation files now, and says whether it did.
    private func reloadSessionBus() {
        guard let bus = try? BusConnection(.user) else {
            print("no session bus is running here: the next one reads the files when it starts")
            return
        }
        do {
            try ActivationFiles.reloadSessionBus(bus)
            print("the running session bus has read them (ReloadConfig)")
        } catch {
            print("the running session bus did not reload (\(error.message)): it reads the files at your next login")
        }
    }

    /// Runs a program with no output, its exit status.
    private func runQuietly(_ path: String, _ arguments: [String]) throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Swift's crash backtracer prints memory where session keys may be: it must be off before
    /// the runtime could use it, so re-exec with it off (as keychaind does).
    private func ensureBacktracesDisabled() {
        if let v = getenv("SWIFT_BACKTRACE"), String(cString: v) == "enable=no" { return }
        setenv("SWIFT_BACKTRACE", "enable=no", 1)
        execv("/proc/self/exe", CommandLine.unsafeArgv)
    }

    private func fail(_ message: String) -> Never {
        BridgeLog.error(message)
        Foundation.exit(1)
    }
}

SecretServiceCommand.main()
