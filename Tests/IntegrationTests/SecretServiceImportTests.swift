import Foundation
import KeychainModel
import Testing

/// `keychain-secret-service --import` (issue 28) from a real gnome-keyring-daemon on the test's
/// private session bus, its login keyring unlocked by a known password (its own --unlock).
@Suite("Secret Service: import from gnome-keyring")
struct SecretServiceImportTests {
    private static let bridge = Binaries.directory + "/keychain-secret-service"
    /// Secrets import_source.py stores; none may show in anything the import prints.
    private static let secrets = ["mail-secret-1", "mail-secret-2", "dup-one", "dup-two", "work-secret"]

    /// gnome-keyring owning org.freedesktop.secrets on a fresh setup's bus, with a fresh home.
    final class GnomeKeyring: @unchecked Sendable {
        let setup: SecretServiceSetup
        let home: String
        private let process = Process()

        init() throws {
            setup = try SecretServiceSetup(startBridge: false)
            home = setup.daemon.root + "/gnome-home"
            try FileManager.default.createDirectory(atPath: home + "/run", withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
            process.executableURL = URL(fileURLWithPath: "/usr/bin/gnome-keyring-daemon")
            process.arguments = ["--unlock", "--components=secrets", "--foreground"]
            process.environment = ["DBUS_SESSION_BUS_ADDRESS": setup.bus.address, "HOME": home,
                                   "XDG_RUNTIME_DIR": home + "/run", "PATH": "/usr/bin:/bin"]
            let input = Pipe()
            process.standardInput = input
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            input.fileHandleForWriting.write(Data("gnome-login-password".utf8))
            try input.fileHandleForWriting.close()
            try waitUntil(timeout: 20, "gnome-keyring to own org.freedesktop.secrets") {
                try setup.ownerPID(of: "org.freedesktop.secrets") == process.processIdentifier
            }
        }

        deinit {
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
            }
        }

        /// Stops gnome-keyring, which does not let another program take the name (its
        /// NameOwner flags do not allow replacement), and waits until the name is free.
        /// SIGKILL: Process under the test runner starts it with SIGTERM blocked, so a SIGTERM
        /// stays pending and the wait never ends; it wrote each item to disk as it came.
        func stop() throws {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            try waitUntil(timeout: 20, "org.freedesktop.secrets to be free") { try setup.ownerPID(of: "org.freedesktop.secrets") == nil }
        }

        /// Runs the bridge with `arguments` as this user's shell would (HOME the daemon's root).
        func bridgeCommand(_ arguments: [String]) throws -> CLIResult {
            try runExecutable(SecretServiceImportTests.bridge, ["--socket", setup.daemon.socketPath] + arguments,
                              environment: setup.environment, input: [])
        }

        func source(_ command: String) throws -> [String: Any] {
            try setup.pythonJSON("import_source.py", [command])
        }
    }

    private func expectNoSecret(in result: CLIResult) {
        for secret in Self.secrets {
            #expect(!result.text.contains(secret) && !result.stderr.contains(secret), "a secret in the output: \(result.text)")
        }
    }

    @Test func aDryRunListsEveryItemAndWritesNothing() throws {
        let keyring = try GnomeKeyring()
        _ = try keyring.source("fill")
        let dry = try keyring.bridgeCommand(["--import", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.text.contains("would import 5 (5 new, 0 updated), skipped 0, failed 0"), "\(dry.text)")
        #expect(dry.text.contains("add \"Work VPN\" (2 attributes) into \"Work\""), "\(dry.text)")
        expectNoSecret(in: dry)
        #expect(try !keyring.setup.daemon.cli(["list"]).text.contains("secret-service"))
    }

    @Test func everyItemArrivesWithItsLabelAttributesSecretTimesAndCollection() throws {
        let keyring = try GnomeKeyring()
        _ = try keyring.source("fill")
        let theirs = try keyring.source("dump")
        let imported = try keyring.bridgeCommand(["--import"])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.text.contains("imported 5 (5 new, 0 updated), skipped 0, failed 0"), "\(imported.text)")
        expectNoSecret(in: imported)

        // The bridge serves in gnome-keyring's place; a client sees through it what it saw there.
        try keyring.stop()
        _ = try keyring.setup.startedBridge()
        let ours = try keyring.source("dump")
        #expect(NSDictionary(dictionary: ours).isEqual(to: theirs), "keychaind: \(ours)\ngnome-keyring: \(theirs)")
    }

    @Test func aSecondRunAddsNothingAndAChangedItemIsUpdated() throws {
        let keyring = try GnomeKeyring()
        _ = try keyring.source("fill")
        #expect(try keyring.bridgeCommand(["--import"]).status == 0)
        let again = try keyring.bridgeCommand(["--import"])
        #expect(again.text.contains("imported 0 (0 new, 0 updated), skipped 5, failed 0"), "\(again.text) \(again.stderr)")
        #expect(again.text.contains("already in keychaind, unchanged"))

        _ = try keyring.source("change")
        let changed = try keyring.bridgeCommand(["--import"])
        #expect(changed.text.contains("imported 1 (0 new, 1 updated), skipped 4, failed 0"), "\(changed.text) \(changed.stderr)")
        expectNoSecret(in: changed)
        let theirs = try keyring.source("dump")
        try keyring.stop()
        _ = try keyring.setup.startedBridge()
        #expect(NSDictionary(dictionary: try keyring.source("dump")).isEqual(to: theirs))
    }

    /// An attribute changed at the provider is the same item changed, not a new one: the
    /// import finds its earlier copy by the provider's path and replaces it.
    @Test func anItemWhoseAttributesChangedAtTheProviderReplacesItsEarlierCopy() throws {
        let keyring = try GnomeKeyring()
        _ = try keyring.source("fill")
        #expect(try keyring.bridgeCommand(["--import"]).status == 0)
        _ = try keyring.source("retag")
        let retagged = try keyring.bridgeCommand(["--import"])
        #expect(retagged.text.contains("imported 1 (0 new, 1 updated), skipped 4, failed 0"), "\(retagged.text) \(retagged.stderr)")
        let theirs = try keyring.source("dump")
        try keyring.stop()
        _ = try keyring.setup.startedBridge()
        let ours = try keyring.source("dump")
        #expect(NSDictionary(dictionary: ours).isEqual(to: theirs), "keychaind: \(ours)\ngnome-keyring: \(theirs)")
    }

    /// gnome-keyring 42 does not give the name up while it runs (no replacement allowed), so
    /// the bridge started in the importer's place says so and exits 2; the files that make the
    /// bridge serve from the next login are written all the same.
    @Test func importWithReplaceKeepsTheBridgeAtLaterLoginsAndSaysWhoKeepsTheNameNow() throws {
        let keyring = try GnomeKeyring()
        _ = try keyring.source("fill")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.bridge)
        process.arguments = ["--socket", keyring.setup.daemon.socketPath, "--import", "--replace"]
        process.environment = keyring.setup.environment
        let log = keyring.setup.daemon.root + "/import-replace.log"
        FileManager.default.createFile(atPath: log, contents: nil)
        let output = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardOutput = output
        process.standardError = output
        try process.run()
        defer {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        var tookName = false
        try waitUntil(timeout: 60, "the importer to take the name or give up") {
            tookName = try keyring.setup.ownerPID(of: "org.freedesktop.secrets") == process.processIdentifier
            return tookName || !process.isRunning
        }
        let text = try String(contentsOfFile: log, encoding: .utf8)
        #expect(text.contains("imported 5 (5 new, 0 updated), skipped 0, failed 0"), "\(text)")
        if !tookName {
            #expect(process.terminationStatus == 2)
            #expect(text.contains("gnome-keyring-daemon") && text.contains("does not allow replacement"), "\(text)")
        }
        let home = keyring.setup.daemon.root
        let activation = try String(contentsOfFile: home + "/.local/share/dbus-1/services/org.freedesktop.secrets.service", encoding: .utf8)
        #expect(activation.contains("Exec=\(Self.bridge) --socket \(keyring.setup.daemon.socketPath)"))
        let hidden = try String(contentsOfFile: home + "/.config/autostart/gnome-keyring-secrets.desktop", encoding: .utf8)
        #expect(hidden.contains("Hidden=true"))
        for secret in Self.secrets { #expect(!text.contains(secret)) }

        // --disable takes both back.
        let disabled = try keyring.bridgeCommand(["--disable"])
        #expect(disabled.text.contains("removed \(home)/.config/autostart/gnome-keyring-secrets.desktop"), "\(disabled.text)")
        #expect(!FileManager.default.fileExists(atPath: home + "/.config/autostart/gnome-keyring-secrets.desktop"))
    }

    @Test func withoutAProviderTheImportSaysSoAndFails() throws {
        let setup = try SecretServiceSetup(startBridge: false)
        let result = try runExecutable(Self.bridge, ["--socket", setup.daemon.socketPath, "--import"], environment: setup.environment, input: [])
        #expect(result.status == 1)
        #expect(result.stderr.contains("no program owns org.freedesktop.secrets"), "\(result.stderr)")
    }
}
