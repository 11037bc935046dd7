// The Secret Service figures (issue 16): keychain-secret-service over keychaind beside
// gnome-keyring-daemon, each on its own private session bus, driven in the same run by one
// secretstorage client (Tests/SecretServiceScripts/bench_driver.py) taking turns between them,
// which also times whole `secret-tool lookup` processes against each.
import Foundation

/// A private dbus-daemon; its address is what it prints first.
final class PrivateBus {
    let process = Process()
    let address: String

    init?() {
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--session", "--nofork", "--print-address=1"]
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        var line = [UInt8]()
        while true {
            let byte = out.fileHandleForReading.readData(ofLength: 1)
            guard let b = byte.first else { return nil }
            if b == UInt8(ascii: "\n") { break }
            line.append(b)
        }
        address = String(decoding: line, as: UTF8.self)
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}

func secretServiceBench(items: Int, rounds: Int = 500) {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    let bridgePath = (exe as NSString).deletingLastPathComponent + "/keychain-secret-service"
    // The driver lives in the source tree, found from this file's own path.
    let driver = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Tests/SecretServiceScripts/bench_driver.py").path
    guard FileManager.default.isExecutableFile(atPath: bridgePath) else {
        print("secret-service: \(bridgePath) is missing (swift build -c release --product keychain-secret-service)")
        return
    }
    let (daemon, socket, dir) = startDaemon(suffix: "ss")
    var stops: [() -> Void] = [{
        daemon.terminate(); daemon.waitUntilExit()
        try? FileManager.default.removeItem(atPath: dir)
    }]
    defer { stops.reversed().forEach { $0() } }

    var servers: [String] = []
    guard let ours = PrivateBus() else { print("secret-service: cannot start dbus-daemon (apt-get install dbus-daemon)"); return }
    stops.append(ours.stop)
    let bridge = Process()
    bridge.executableURL = URL(fileURLWithPath: bridgePath)
    bridge.arguments = ["--socket", socket, "--no-portal"]
    bridge.environment = ProcessInfo.processInfo.environment.merging(["DBUS_SESSION_BUS_ADDRESS": ours.address]) { $1 }
    bridge.standardError = FileHandle.nullDevice
    try! bridge.run()
    stops.append { bridge.terminate(); bridge.waitUntilExit() }
    servers.append("keychaind=\(ours.address)")

    // gnome-keyring with a fresh login keyring, unlocked from stdin (its --unlock), in a
    // private home so the person's own keyring is never touched.
    if FileManager.default.isExecutableFile(atPath: "/usr/bin/gnome-keyring-daemon"), let theirs = PrivateBus() {
        stops.append(theirs.stop)
        let home = dir + "-gnome"
        try? FileManager.default.createDirectory(atPath: home + "/run", withIntermediateDirectories: true,
                                                 attributes: [.posixPermissions: 0o700])
        let keyring = Process()
        keyring.executableURL = URL(fileURLWithPath: "/usr/bin/gnome-keyring-daemon")
        keyring.arguments = ["--unlock", "--components=secrets", "--foreground"]
        keyring.environment = ["DBUS_SESSION_BUS_ADDRESS": theirs.address, "HOME": home,
                               "XDG_RUNTIME_DIR": home + "/run", "PATH": "/usr/bin:/bin"]
        let input = Pipe()
        keyring.standardInput = input
        keyring.standardOutput = FileHandle.nullDevice
        keyring.standardError = FileHandle.nullDevice
        try! keyring.run()
        input.fileHandleForWriting.write(Data("bench-login-password".utf8))
        try? input.fileHandleForWriting.close()
        stops.append {
            keyring.terminate(); keyring.waitUntilExit()
            try? FileManager.default.removeItem(atPath: home)
        }
        servers.append("gnome-keyring=\(theirs.address)")
    } else {
        print("secret-service: gnome-keyring-daemon not installed: no yardstick")
    }

    let run = Process()
    run.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    run.arguments = [driver] + servers
    run.environment = ProcessInfo.processInfo.environment.merging(
        ["BENCH_ITEMS": String(items), "BENCH_ROUNDS": String(rounds)]) { $1 }
    let out = Pipe()
    run.standardOutput = out
    try! run.run()
    let answer = out.fileHandleForReading.readDataToEndOfFile()
    run.waitUntilExit()
    // {label: {op: {"p50_ms": x, "p90_ms": y}}}
    guard run.terminationStatus == 0,
          let figures = try? JSONSerialization.jsonObject(with: answer) as? [String: [String: [String: Double]]] else {
        print("secret-service: the driver failed (exit \(run.terminationStatus))")
        return
    }
    for label in ["keychaind", "gnome-keyring"] {
        guard let ops = figures[label] else { continue }
        for op in ["lookup", "store", "floor", "secret-tool"] {
            guard let f = ops[op], let p50 = f["p50_ms"], let p90 = f["p90_ms"] else { continue }
            var line = String(format: "secret-service %@ %@ items=%d rounds=%d p50=%6.3fms p90=%6.3fms",
                              label.padding(toLength: 13, withPad: " ", startingAt: 0),
                              op.padding(toLength: 11, withPad: " ", startingAt: 0), items, rounds, p50, p90)
            if label == "keychaind", let theirs = figures["gnome-keyring"]?[op]?["p50_ms"], p50 > 0 {
                line += String(format: "  gnome-keyring/keychaind=%.2fx", theirs / p50)
            }
            print(line)
        }
    }
}
