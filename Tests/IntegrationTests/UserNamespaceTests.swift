import Foundation
import Testing

/// A user's keychaind under its sandboxed unit runs in a user namespace that does not map
/// root (systemd's PrivateUsers=), where / and every directory of root's show as the overflow
/// uid. Found by booting the package under systemd: the parents' check refused to start.
@Suite("A user's daemon in a user namespace", .serialized)
struct UserNamespaceTests {
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")))
    func aDaemonInANamespaceWithoutRootStartsBelowRootsDirectoriesAndServes() throws {
        let uid = try MultiUserTests.user("kcuserns")
        let root = "/tmp/kc-userns-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: root) }
        for (path, owner) in [(root, UInt32(0)), (root + "/state", uid), (root + "/run", uid)] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            #expect(chown(path, owner, owner) == 0 && chmod(path, owner == 0 ? 0o755 : 0o700) == 0)
        }
        let socket = root + "/run/kc.sock"
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        daemon.arguments = ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "/usr/bin/unshare", "--user", "--map-current-user",
                            Binaries.keychaind, "--state-dir", root + "/state", "--socket", socket]
        daemon.environment = ["HOME": root, "KEYCHAIND_INSECURE_FAST_KDF": "1", "PATH": "/usr/bin:/bin"]
        let log = Pipe()
        daemon.standardError = log
        daemon.standardOutput = FileHandle.nullDevice
        try daemon.run()
        defer { kill(daemon.processIdentifier, SIGKILL); daemon.waitUntilExit() }
        let deadline = Date().addingTimeInterval(20)
        while !FileManager.default.fileExists(atPath: socket) && daemon.isRunning && Date() < deadline { usleep(20_000) }
        guard FileManager.default.fileExists(atPath: socket) else {
            kill(daemon.processIdentifier, SIGKILL)
            Issue.record("the daemon did not start: \(String(decoding: log.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))")
            return
        }
        let status = try runExecutable(Binaries.keychain, ["status", "--socket", socket],
                                       environment: ["HOME": root, "PATH": "/usr/bin:/bin"], input: [], asUser: uid)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.text.contains("state: unlocked"))
    }
}
