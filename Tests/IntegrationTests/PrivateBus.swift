import Foundation
import KeychainModel

/// A dbus-daemon of the test's own acting as the system bus: system-like, but allowing every
/// client to own any name and send anything. Point DBUS_SYSTEM_BUS_ADDRESS at `address`.
/// Stopped, and its files removed, when the value goes away.
final class PrivateSystemBus: @unchecked Sendable {
    let root: String
    let address: String
    private let process: Process

    /// With `activationDirectory`, a session-type bus that starts the services whose activation
    /// files are there (as a user's session bus does with ~/.local/share/dbus-1/services).
    init(activationDirectory: String? = nil) throws {
        var template = Array("/tmp/kcbus.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        root = String(cString: p)
        chmod(root, 0o755)  // a daemon running as another user connects too
        let socket = root + "/system_bus_socket"
        address = "unix:path=" + socket
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>\(activationDirectory == nil ? "system" : "session")</type>
              \(activationDirectory.map { "<servicedir>\($0)</servicedir>" } ?? "")
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_destination="*"/>
                <allow receive_sender="*"/>
              </policy>
            </busconfig>

            """
        try config.write(toFile: root + "/bus.conf", atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--config-file=\(root)/bus.conf", "--nofork", "--nopidfile", "--print-address=1"]
        process.standardError = FileHandle.nullDevice  // it warns that it cannot raise its fd limit
        let ready = Pipe()
        process.standardOutput = ready
        try process.run()
        // It prints its address once it accepts connections (the socket file comes earlier).
        let printed = ready.fileHandleForReading.readData(ofLength: 5)
        guard printed == Data("unix:".utf8) else {
            throw KeychainError(.serviceNotAvailable, "dbus-daemon did not start")
        }
    }

    deinit {
        if process.isRunning {
            // Not SIGTERM: it inherits the test runner's blocked signals. It holds nothing to save.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(atPath: root)
    }

    /// The environment a client of this bus needs.
    var environment: [String: String] { ["DBUS_SYSTEM_BUS_ADDRESS": address] }
}

/// Tests/Fakes/login1.py on a private bus: it owns org.freedesktop.login1 and serves the
/// sessions it is given (session ID → uid); `send` has it emit a signal.
final class FakeLogin1: @unchecked Sendable {
    private let process = Process()
    private let commands = Pipe()

    init(on bus: PrivateSystemBus, sessions: [String: UInt32]) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../Fakes/login1.py").standardized.path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")  // Debian's, with python3-dbus
        process.arguments = [script] + sessions.map { "\($0.key)=\($0.value)" }
        process.environment = bus.environment.merging(["PATH": "/usr/bin:/bin"]) { $1 }
        let output = Pipe()
        process.standardInput = commands
        process.standardOutput = output
        try process.run()
        // "ready" once it owns the name; nothing (end of output) if it failed.
        let line = output.fileHandleForReading.readData(ofLength: 6)
        guard line == Data("ready\n".utf8) else {
            throw KeychainError(.serviceNotAvailable, "the stand-in for logind did not start")
        }
    }

    deinit {
        try? commands.fileHandleForWriting.close()  // end of input: it releases the name and exits
        process.waitUntilExit()
    }

    /// Session.Lock from /org/freedesktop/login1/session/ID.
    func lock(session id: String) { send("lock \(id)") }

    /// Manager.PrepareForSleep(start).
    func prepareForSleep(_ start: Bool) { send("sleep \(start)") }

    private func send(_ command: String) {
        try? commands.fileHandleForWriting.write(contentsOf: Data((command + "\n").utf8))
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` seconds pass; throws on time-out.
func waitUntil(timeout: Double, _ what: String = "a condition", _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return }
        usleep(20_000)
    }
    throw KeychainError(.io, "timed out waiting for \(what)")
}
