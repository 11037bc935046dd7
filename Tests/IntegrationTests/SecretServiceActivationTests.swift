import DBus
import Foundation
import KeychainModel
import Testing

/// `keychain-secret-service --enable/--disable` (design slice 6): the activation files that
/// let the session bus start the bridge when a libsecret client first asks for it.
@Suite("Secret Service: activation")
struct SecretServiceActivationTests {
    private static let bridge = Binaries.directory + "/keychain-secret-service"

    private func bridgeCommand(_ arguments: [String], dataHome: String) throws -> CLIResult {
        try runExecutable(Self.bridge, arguments, environment: ["XDG_DATA_HOME": dataHome, "HOME": dataHome, "PATH": "/usr/bin:/bin"],
                          input: [])
    }

    @Test func aClientStartsTheBridgeThroughTheFilesEnableWrites() throws {
        let daemon = try RunningDaemon()
        let dataHome = daemon.root + "/data"
        let enabled = try bridgeCommand(["--enable", "--socket", daemon.socketPath], dataHome: dataHome)
        #expect(enabled.status == 0, "\(enabled.stderr)")
        let services = dataHome + "/dbus-1/services"
        let written = try String(contentsOfFile: services + "/org.freedesktop.secrets.service", encoding: .utf8)
        #expect(written.contains("Name=org.freedesktop.secrets\nExec=\(Self.bridge) --socket \(daemon.socketPath)\n"))
        #expect(FileManager.default.fileExists(atPath: services + "/org.freedesktop.impl.portal.desktop.keychain.service"))

        // No bridge is running: the bus starts one from the file when secret-tool asks.
        let bus = try PrivateSystemBus(activationDirectory: services)
        let environment = ["DBUS_SESSION_BUS_ADDRESS": bus.address, "PATH": "/usr/bin:/bin", "HOME": daemon.root]
        let stored = try runExecutable("/usr/bin/secret-tool", ["store", "--label", "Activated", "service", "activation"],
                                       environment: environment, input: bytes("started on demand"))
        #expect(stored.status == 0, "\(stored.stderr)")
        let lookup = try runExecutable("/usr/bin/secret-tool", ["lookup", "service", "activation"], environment: environment, input: [])
        #expect(lookup.status == 0 && lookup.text == "started on demand", "\(lookup.stderr)")
        #expect(try daemon.cli(["list"]).text.contains("Activated"))
        // The bus started the bridge, so no test object stops it: stop it here.
        let owner = try BusConnection(address: bus.address).call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetConnectionUnixProcessID", arguments: [.string("org.freedesktop.secrets")]).readUInt32()
        kill(pid_t(owner), SIGTERM)
    }

    @Test func disableRemovesWhatEnableWroteAndNothingElse() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        #expect(try bridgeCommand(["--enable", "--socket", daemon.socketPath], dataHome: dataHome).status == 0)
        let services = dataHome + "/dbus-1/services"
        // Another program's file for the portal name: not ours to remove.
        let foreign = "[D-BUS Service]\nName=org.freedesktop.impl.portal.desktop.keychain\nExec=/usr/bin/something-else\n"
        try foreign.write(toFile: services + "/org.freedesktop.impl.portal.desktop.keychain.service", atomically: true, encoding: .utf8)
        let disabled = try bridgeCommand(["--disable"], dataHome: dataHome)
        #expect(disabled.status == 0 && disabled.text.contains("removed \(services)/org.freedesktop.secrets.service"))
        #expect(!FileManager.default.fileExists(atPath: services + "/org.freedesktop.secrets.service"))
        #expect(try String(contentsOfFile: services + "/org.freedesktop.impl.portal.desktop.keychain.service", encoding: .utf8) == foreign)
        #expect(try bridgeCommand(["--disable"], dataHome: dataHome).text.contains("nothing to remove"))
    }

    @Test func enableHidesGnomeKeyringsSecretsAutostartForThisUserAndDisableShowsItAgain() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        let hidden = dataHome + "/.config/autostart/gnome-keyring-secrets.desktop"
        let enabled = try bridgeCommand(["--enable", "--socket", daemon.socketPath], dataHome: dataHome)
        #expect(enabled.text.contains("wrote \(hidden)"), "\(enabled.text)")
        #expect(try String(contentsOfFile: hidden, encoding: .utf8).contains("\nHidden=true\n"))
        let disabled = try bridgeCommand(["--disable"], dataHome: dataHome)
        #expect(disabled.text.contains("removed \(hidden)"))
        #expect(!FileManager.default.fileExists(atPath: hidden))
    }

    @Test func anAutostartEntryTheUserWroteIsNeitherReplacedNorRemoved() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        let autostart = dataHome + "/.config/autostart"
        try FileManager.default.createDirectory(atPath: autostart, withIntermediateDirectories: true)
        let own = "[Desktop Entry]\nType=Application\nName=Mine\nExec=/usr/bin/gnome-keyring-daemon --start --components=secrets\n"
        try own.write(toFile: autostart + "/gnome-keyring-secrets.desktop", atomically: true, encoding: .utf8)
        #expect(try bridgeCommand(["--enable", "--socket", daemon.socketPath], dataHome: dataHome).status == 0)
        #expect(try bridgeCommand(["--disable"], dataHome: dataHome).status == 0)
        #expect(try String(contentsOfFile: autostart + "/gnome-keyring-secrets.desktop", encoding: .utf8) == own)
    }

    @Test func enableWritesTheTrustedUIDIntoTheExecLineAsANumber() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        // A user name is resolved here, so the bus's Exec= line carries digits only.
        let enabled = try bridgeCommand(["--enable", "--socket", daemon.socketPath, "--trust-uid", "root"], dataHome: dataHome)
        #expect(enabled.status == 0, "\(enabled.stderr)")
        let written = try String(contentsOfFile: dataHome + "/dbus-1/services/org.freedesktop.secrets.service", encoding: .utf8)
        #expect(written.contains("\nExec=\(Self.bridge) --socket \(daemon.socketPath) --trust-uid 0\n"), "\(written)")
    }

    @Test func enableRefusesATrustedUserThatDoesNotExist() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        let enabled = try bridgeCommand(["--enable", "--socket", daemon.socketPath, "--trust-uid", "no-such-user-here"], dataHome: dataHome)
        #expect(enabled.status != 0 && enabled.stderr.contains("neither a numeric uid nor a user"), "\(enabled.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dataHome + "/dbus-1/services/org.freedesktop.secrets.service"))
    }

    @Test func enableRefusesASocketPathTheExecLineCannotCarry() throws {
        let daemon = try RunningDaemon(start: false)
        let dataHome = daemon.root + "/data"
        let relative = try bridgeCommand(["--enable", "--socket", "relative/s.sock"], dataHome: dataHome)
        #expect(relative.status != 0 && relative.stderr.contains("absolute path"))
        let spaced = try bridgeCommand(["--enable", "--socket", "/tmp/a b/s.sock"], dataHome: dataHome)
        #expect(spaced.status != 0 && spaced.stderr.contains("cannot carry"))
        #expect(!FileManager.default.fileExists(atPath: dataHome + "/dbus-1/services/org.freedesktop.secrets.service"))
    }
}
