// The Secret Service figures (issues 16 and 28): keychain-secret-service over keychaind beside
// gnome-keyring-daemon, each on its own private session bus, driven in the same run by one
// secretstorage client (Tests/SecretServiceScripts/bench_driver.py) taking turns between them,
// which also times whole `secret-tool lookup` processes against each, the server's time per
// method from `dbus-monitor --profile` on each bus, and a libsecret lookup from C
// (Tests/SecretServiceScripts/libsecret_lookup.c, built here with the system's cc).
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
    let (daemon, socket, dir) = startDaemon(suffix: "ss\(items)")
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

    var environment = ["BENCH_ITEMS": String(items), "BENCH_ROUNDS": String(rounds)]
    if let lookup = buildLibsecretLookup(source: (driver as NSString).deletingLastPathComponent + "/libsecret_lookup.c",
                                         into: dir) {
        environment["BENCH_LOOKUP"] = lookup
    }
    let run = Process()
    run.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    run.arguments = [driver] + servers
    run.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
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
    printTargets(figures, items: items, rounds: rounds)
}

/// Issue 28's targets, each a ratio of two medians of this run: the server's time per method
/// (keychaind's over gnome-keyring's: at most 1/3, CreateItem 1/10), and a libsecret lookup from
/// C (gnome-keyring's time over keychaind's: at least 1.3).
func printTargets(_ figures: [String: [String: [String: Double]]], items: Int, rounds: Int) {
    guard let ours = figures["keychaind"], let theirs = figures["gnome-keyring"] else { return }
    let targets: [(op: String, most: Double?)] = [("SearchItems", 1.0 / 3), ("GetSecrets", 1.0 / 3), ("CreateItem", 0.1), ("Ping", nil)]
    for (op, most) in targets {
        guard let a = ours[op]?["p50_ms"], let b = theirs[op]?["p50_ms"], b > 0 else { continue }
        var line = String(format: "secret-service server-time %@ items=%d rounds=%d keychaind p50=%7.1fus gnome-keyring p50=%7.1fus keychaind/gnome-keyring=%.2f",
                          op.padding(toLength: 11, withPad: " ", startingAt: 0), items, rounds, a * 1000, b * 1000, a / b)
        if let most {
            line += String(format: "  target <= %.2f: %@", most, a / b <= most ? "met" : "NOT met")
        } else {
            line += "  (the bus's floor)"
        }
        print(line)
    }
    if let a = ours["libsecret"]?["p50_ms"], let b = theirs["libsecret"]?["p50_ms"], a > 0 {
        print(String(format: "secret-service libsecret-lookup items=%d rounds=%d keychaind p50=%7.1fus gnome-keyring p50=%7.1fus gnome-keyring/keychaind=%.2fx  target >= 1.30x: %@",
                     items, rounds, a * 1000, b * 1000, b / a, b / a >= 1.3 ? "met" : "NOT met"))
    }
}

/// libsecret_lookup.c built against the system's libsecret (libsecret-1-dev), or nil with the
/// reason printed.
func buildLibsecretLookup(source: String, into dir: String) -> String? {
    let output = dir + "/libsecret-lookup"
    let build = Process()
    build.executableURL = URL(fileURLWithPath: "/bin/sh")
    build.arguments = ["-c", "cc -O2 -o \"$1\" \"$2\" $(pkg-config --cflags --libs libsecret-1)", "sh", output, source]
    build.standardError = FileHandle.nullDevice
    guard (try? build.run()) != nil else { return nil }
    build.waitUntilExit()
    guard build.terminationStatus == 0 else {
        print("secret-service: cannot build \(source) (scripts/install-deps installs gcc, pkg-config and libsecret-1-dev): no libsecret figure")
        return nil
    }
    return output
}
