// Issue 24's floors, each read from figures of the same run: `keychain get` against `keyctl
// pipe` as whole processes, a KeychainClient get against the bare socket round trip, and 8
// clients' gets at 100,000 items.
import Foundation

/// `keychain --version`, `keychain get` and `keyctl pipe` as whole processes: medians in ms,
/// through hyperfine when it is installed (the yardstick), else this bench's own
/// interleaved posix_spawn timing; nil without keyctl.
func cliFigures(cli: String, socket: String) -> (get: Double, keyctl: Double, version: Double, by: String)? {
    let keyctl = "/usr/bin/keyctl"
    guard FileManager.default.isExecutableFile(atPath: keyctl),
          let id = output(of: keyctl, ["add", "user", "kcbench", "x", "@u"]),
          let version = TimedCommand(cli, ["--version"]),
          let get = TimedCommand(cli, ["get", "--service", "cli", "--account", "a"], env: ["KEYCHAIN_SOCKET": socket]),
          let pipe = TimedCommand(keyctl, ["pipe", id]) else { return nil }
    let hyperfine = "/usr/bin/hyperfine"
    if FileManager.default.isExecutableFile(atPath: hyperfine),
       let m = hyperfineMedians(hyperfine, ["\(cli) --version", "\(cli) get --service cli --account a", "\(keyctl) pipe \(id)"],
                                env: ["KEYCHAIN_SOCKET": socket]) {
        return (m[1], m[2], m[0], "hyperfine")
    }
    guard let m = interleavedMedians([version, get, pipe]) else { return nil }
    return (m[1], m[2], m[0], "posix_spawn, interleaved")
}

/// The commands' median wall times (ms) from one hyperfine run (no shell, 20 warm-up runs and
/// 300 timed runs each).
func hyperfineMedians(_ hyperfine: String, _ commands: [String], env: [String: String]) -> [Double]? {
    let json = NSTemporaryDirectory() + "kcbench-hyperfine-\(getpid()).json"
    defer { try? FileManager.default.removeItem(atPath: json) }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: hyperfine)
    p.arguments = ["-N", "--warmup", "20", "--runs", "300", "--style", "none", "--export-json", json] + commands
    p.environment = ProcessInfo.processInfo.environment.merging(env) { $1 }
    p.standardOutput = FileHandle.nullDevice
    p.standardError = FileHandle.nullDevice
    guard (try? p.run()) != nil else { return nil }
    p.waitUntilExit()
    guard p.terminationStatus == 0, let data = FileManager.default.contents(atPath: json),
          let top = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
          let results = top["results"] as? [[String: Any]], results.count == commands.count else { return nil }
    let medians = results.compactMap { $0["median"] as? Double }.map { $0 * 1000 }
    return medians.count == commands.count ? medians : nil
}

/// A command's standard output, trimmed; nil if it failed.
func output(of path: String, _ args: [String]) -> String? {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: path)
    p.arguments = args
    let out = Pipe()
    p.standardOutput = out
    guard (try? p.run()) != nil else { return nil }
    let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    p.waitUntilExit()
    return p.terminationStatus == 0 ? text.trimmingCharacters(in: .whitespacesAndNewlines) : nil
}

/// One line per floor: the figure, the limit, and whether this run meets it.
func printFloors(bare: Figure, gets: [String: Figure], cli: (get: Double, keyctl: Double, version: Double, by: String)?) {
    func verdict(_ met: Bool) -> String { met ? "met" : "NOT met" }
    let bareP50 = percentile(bare.latencies.sorted(), 0.5)
    if let cli {
        let ratio = cli.get / cli.keyctl
        print(String(format: "floor  keychain get / keyctl pipe = %.3f / %.3f ms = %.2f", cli.get, cli.keyctl, ratio)
              + " (<= 1.30: \(verdict(ratio <= 1.3)))" + String(format: "; beyond --version %.3f ms", cli.get - cli.version))
    }
    for (key, figure) in gets.sorted(by: { $0.key < $1.key }) where key.hasSuffix("/1") {
        let p50 = percentile(figure.latencies.sorted(), 0.5)
        let ratio = p50 / bareP50
        print("floor  get p50 / bare p50 (n=\(key.dropLast(2)), 1 client) = "
              + String(format: "%.1f / %.1f us = %.2f", p50, bareP50, ratio) + " (<= 1.50: \(verdict(ratio <= 1.5)))")
    }
    for (key, figure) in gets.sorted(by: { $0.key < $1.key }) where key.hasSuffix("/8") {
        let rate = Double(figure.operations) / figure.seconds
        print("floor  gets/s, 8 clients, n=\(key.dropLast(2)) = " + String(format: "%.0f", rate)
              + " (>= 50000: \(verdict(rate >= 50_000)))")
    }
    fflush(nil)
}
