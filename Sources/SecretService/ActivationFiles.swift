#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainModel

/// The D-Bus activation files that let the session bus start the bridge when a client first
/// asks for org.freedesktop.secrets (or the portal backend's name). Opt-in and per user:
/// gnome-keyring ships a file for the same name in /usr/share/dbus-1/services, and two files
/// for one name in one directory give an arbitrary winner, so ours go to the user's own
/// directory, which the session bus searches first (`--enable`), and `--disable` takes them back.
public struct ActivationFiles {
    public static let secretsFile = "org.freedesktop.secrets.service"
    public static let portalFile = "org.freedesktop.impl.portal.desktop.keychain.service"

    /// $XDG_DATA_HOME/dbus-1/services, else ~/.local/share/dbus-1/services.
    public let userDirectory: String
    /// Where `make install` and the package put the files (PREFIX/share/keychaind/dbus-1),
    /// found from the executable's own path; nil for a bridge run from a build directory.
    public let shippedDirectory: String?
    public let executable: String
    /// $XDG_CONFIG_HOME/autostart, else ~/.config/autostart: where a user's entry hides the
    /// system's entry of the same name.
    public let autostartDirectory: String
    /// gnome-keyring's entry that starts its Secret Service at a desktop login, where one of
    /// $XDG_CONFIG_DIRS (else /etc/xdg) has it; nil when gnome-keyring's is not installed.
    public let gnomeKeyringAutostart: String?

    public static let gnomeKeyringSecretsEntry = "gnome-keyring-secrets.desktop"

    public init(executable: String, environment: [String: String]) throws(KeychainError) {
        let dataHome: String
        if let xdg = environment["XDG_DATA_HOME"], xdg.hasPrefix("/") {
            dataHome = xdg
        } else if let home = environment["HOME"], home.hasPrefix("/") {
            dataHome = home + "/.local/share"
        } else {
            throw KeychainError(.param, "neither XDG_DATA_HOME nor HOME is set: cannot find the user's D-Bus services directory")
        }
        userDirectory = dataHome + "/dbus-1/services"
        if let xdg = environment["XDG_CONFIG_HOME"], xdg.hasPrefix("/") {
            autostartDirectory = xdg + "/autostart"
        } else if let home = environment["HOME"], home.hasPrefix("/") {
            autostartDirectory = home + "/.config/autostart"
        } else {
            throw KeychainError(.param, "neither XDG_CONFIG_HOME nor HOME is set: cannot find the user's autostart directory")
        }
        let configDirectories = (environment["XDG_CONFIG_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/etc/xdg").split(separator: ":")
        gnomeKeyringAutostart = configDirectories.map { $0 + "/autostart/" + Self.gnomeKeyringSecretsEntry }
            .first { access($0, R_OK) == 0 }
        self.executable = executable
        let prefix = URL(fileURLWithPath: executable).deletingLastPathComponent().deletingLastPathComponent().path
        let shipped = prefix + "/share/keychaind/dbus-1"
        shippedDirectory = access(shipped + "/" + Self.secretsFile, R_OK) == 0 ? shipped : nil
    }

    /// The text of one activation file. An installed bridge's shipped file names the systemd
    /// user unit (so systemd starts it, in its sandbox); a bridge from a build directory, or one
    /// told which socket to use, is started by the bus itself with that socket (and the uid it
    /// trusts, if one was named: the bus does not pass on this shell's environment).
    func contents(of file: String, socket: String?, trustedUID: UInt32? = nil) throws(KeychainError) -> String {
        if socket == nil, let shippedDirectory,
           let text = try? String(contentsOfFile: shippedDirectory + "/" + file, encoding: .utf8) {
            return text
        }
        let name = String(file.dropLast(".service".count))
        // dbus-daemon splits Exec= like a shell: a path with a blank, quote, backslash or line
        // break in it would become other arguments.
        for path in [executable] + (socket.map { [$0] } ?? []) where path.contains(where: { " \t\n\"'\\%".contains($0) }) {
            throw KeychainError(.param, "\(path) holds a character an activation file's Exec= line cannot carry")
        }
        let exec = executable + (socket.map { " --socket " + $0 } ?? "") + (trustedUID.map { " --trust-uid \($0)" } ?? "")
        return "# Written by keychain-secret-service --enable; removed by --disable.\n[D-BUS Service]\nName=\(name)\nExec=\(exec)\n"
    }

    /// Writes both files (atomically, through a temporary file in the same directory; 0600, as
    /// the bus that reads them runs as this user), and hides gnome-keyring's secrets autostart
    /// entry; the paths written.
    public func enable(socket: String?, trustedUID: UInt32? = nil) throws(KeychainError) -> [String] {
        if let socket, !socket.hasPrefix("/") {
            throw KeychainError(.param, "--socket for an activation file must be an absolute path")
        }
        try makeDirectories(userDirectory)
        var written: [String] = []
        for file in [Self.secretsFile, Self.portalFile] {
            let path = userDirectory + "/" + file
            let bytes = Array(try contents(of: file, socket: socket, trustedUID: trustedUID).utf8)
            let outcome = bytes.withUnsafeBytes { raw in
                Result { () throws(SystemCallError) in try DurableFile.write(raw, to: path, placement: .replace) }
            }
            if case .failure(let error) = outcome { throw error.keychainError("cannot write \(path)") }
            written.append(path)
        }
        if let hidden = try hideGnomeKeyringAutostart() { written.append(hidden) }
        return written
    }

    /// Hides gnome-keyring's secrets autostart entry for this user (an entry of the same name
    /// with Hidden=true in the user's autostart directory), so that a desktop login does not
    /// start gnome-keyring's Secret Service beside the bridge; nil when that entry is not
    /// installed, or the user has an entry of that name of their own, which stays.
    public func hideGnomeKeyringAutostart() throws(KeychainError) -> String? {
        guard gnomeKeyringAutostart != nil else { return nil }
        let path = autostartDirectory + "/" + Self.gnomeKeyringSecretsEntry
        if let text = try? String(contentsOfFile: path, encoding: .utf8), !text.contains(Self.autostartMarker) { return nil }
        try makeDirectories(autostartDirectory)
        let text = "# \(Self.autostartMarker)\n[Desktop Entry]\nType=Application\nName=Secret Storage Service\nHidden=true\n"
        let outcome = Array(text.utf8).withUnsafeBytes { raw in
            Result { () throws(SystemCallError) in try DurableFile.write(raw, to: path, placement: .replace) }
        }
        if case .failure(let error) = outcome { throw error.keychainError("cannot write \(path)") }
        return path
    }

    static let autostartMarker = "Written by keychain-secret-service --enable; removed by --disable."

    /// Removes the files `enable` and `hideGnomeKeyringAutostart` wrote; a file of the same
    /// name that is not ours (it does not name keychain-secret-service) is left where it is.
    /// The paths removed.
    public func disable() throws(KeychainError) -> [String] {
        var removed: [String] = []
        for path in [Self.secretsFile, Self.portalFile].map({ userDirectory + "/" + $0 })
            + [autostartDirectory + "/" + Self.gnomeKeyringSecretsEntry] {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { continue }
            guard text.contains("keychain-secret-service") else { continue }
            guard unlink(path) == 0 else {
                throw KeychainError(.io, "cannot remove \(path): \(String(cString: strerror(errno)))")
            }
            removed.append(path)
        }
        return removed
    }

    /// Has the running session bus read its service directories again, so that files just
    /// written or removed count at once: a bus started before the user's services directory
    /// existed watches none, and would start gnome-keyring's bridge until the next login.
    public static func reloadSessionBus(_ bus: BusConnection) throws(KeychainError) {
        _ = try bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                         interface: "org.freedesktop.DBus", member: "ReloadConfig")
    }

    /// mkdir -p with 0755 for the directories it makes (~/.local/share may not exist yet).
    private func makeDirectories(_ path: String) throws(KeychainError) {
        var built = ""
        for part in path.split(separator: "/") {
            built += "/" + part
            if mkdir(built, 0o755) != 0 && errno != EEXIST {
                throw KeychainError(.io, "cannot create \(built): \(String(cString: strerror(errno)))")
            }
        }
    }
}
