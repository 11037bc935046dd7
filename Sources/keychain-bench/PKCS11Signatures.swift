import Foundation
import KeychainClient

/// One module's figures from keychain-pkcs11-bench (pkcs11/bench.c) for one key type.
struct PKCS11Figure {
    /// Signatures per second, one thread.
    let rate: Double
    /// One thread's median time per signature, µs.
    let median: Double
    /// Signatures per second, eight threads each in its own session.
    let eightThreads: Double

    /// Each field's median over the rounds, by type; a type missing from any round is missing.
    static func medians(of rounds: [[String: PKCS11Figure]]) -> [String: PKCS11Figure] {
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        var result: [String: PKCS11Figure] = [:]
        for type in rounds.first?.keys.map({ $0 }) ?? [] {
            let all = rounds.compactMap { $0[type] }
            guard all.count == rounds.count else { continue }
            result[type] = PKCS11Figure(rate: median(all.map(\.rate)), median: median(all.map(\.median)),
                                        eightThreads: median(all.map(\.eightThreads)))
        }
        return result
    }
}

/// Signatures through libkeychaind-pkcs11.so against SoftHSM2, which signs in-process (the floor
/// a daemon can approach), in this run (issue 30, "Speed"): P-256 (CKM_ECDSA) and Ed25519
/// (CKM_EDDSA), one thread then eight, in `rounds` rounds. The module is C and keychain-bench
/// links no C module, so both run in keychain-pkcs11-bench (`make bench` builds it), the module
/// on this run's keychaind.
func pkcs11Figures(socket: String, signatures: Int, rounds: Int = 3) {
    let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    // .build/<triple>/release/keychain-bench, beside .build/pkcs11.
    let built = URL(fileURLWithPath: exe).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("pkcs11").path
    let bench = built + "/keychain-pkcs11-bench", module = built + "/libkeychaind-pkcs11.so"
    let softhsm = "/usr/lib/softhsm/libsofthsm2.so"
    for needed in [bench, module, softhsm] where !FileManager.default.fileExists(atPath: needed) {
        print("pkcs11 needs \(needed) (make pkcs11 .build/pkcs11/keychain-pkcs11-bench; softhsm2)")
        return
    }
    let dir = "/tmp/kcb-pkcs11.\(getpid())"
    mkdir(dir, 0o700)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    mkdir(dir + "/tokens", 0o700)
    try? "directories.tokendir = \(dir)/tokens\nobjectstore.backend = file\nlog.level = ERROR\n"
        .write(toFile: dir + "/softhsm2.conf", atomically: true, encoding: .utf8)
    let softhsmEnvironment = ["SOFTHSM2_CONF": dir + "/softhsm2.conf"]
    guard output(of: "/usr/bin/softhsm2-util", ["--init-token", "--free", "--label", "bench", "--pin", "1234", "--so-pin", "5678"],
                 environment: softhsmEnvironment) != nil else {
        print("pkcs11 softhsm2-util --init-token failed")
        return
    }
    // Rounds in turn, module then SoftHSM2, so that the machine's noise falls on both alike; each
    // figure is the median of its rounds.
    var ourRounds: [[String: PKCS11Figure]] = [], floorRounds: [[String: PKCS11Figure]] = []
    for _ in 0..<rounds {
        ourRounds.append(figures(output(of: bench, [module, "", String(signatures)], environment: ["KEYCHAIN_SOCKET": socket])))
        floorRounds.append(figures(output(of: bench, [softhsm, "1234", String(signatures)], environment: softhsmEnvironment)))
    }
    let ours = PKCS11Figure.medians(of: ourRounds), floor = PKCS11Figure.medians(of: floorRounds)
    // The module cannot delete keys (they are managed with `keychain`): the bench's go here.
    let connection = KeychainConnection(socketPath: socket)
    for key in (try? KeychainKey.find(label: "pkcs11-bench", connection: connection)) ?? [] { try? key.delete() }
    for type in ["p256", "ed25519"] {
        guard let mine = ours[type], let theirs = floor[type] else {
            print("pkcs11 \(type): keychain-pkcs11-bench failed for \(ours[type] == nil ? "the module" : "SoftHSM2")")
            continue
        }
        let name = type.padding(toLength: 8, withPad: " ", startingAt: 0)
        for (who, f) in [("module  ", mine), ("softhsm2", theirs)] {
            print("pkcs11 \(name) \(who) t=1 ops/s=" + String(format: "%8.0f  median=%7.1fus   t=8 ops/s=%8.0f  8 threads / 1: %.2fx",
                                                               f.rate, f.median, f.eightThreads, f.eightThreads / f.rate))
        }
        print("pkcs11 \(name) module / SoftHSM2, one thread: " + String(format: "%.2fx the median time per signature, %.2fx the mean", mine.median / theirs.median, theirs.rate / mine.rate)
              + " (issue 30: at most 1.5x)")
        fflush(nil)
    }
}

/// The "figures TYPE RATE1 MEDIAN1 RATE8" lines of keychain-pkcs11-bench, by type.
private func figures(_ output: String?) -> [String: PKCS11Figure] {
    var found: [String: PKCS11Figure] = [:]
    for line in (output ?? "").split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count == 5, fields[0] == "figures", let rate = Double(fields[2]), let median = Double(fields[3]),
              let eight = Double(fields[4]) else { continue }
        found[String(fields[1])] = PKCS11Figure(rate: rate, median: median, eightThreads: eight)
    }
    return found
}

/// A command's standard output when it exits 0.
private func output(of path: String, _ arguments: [String], environment: [String: String]) -> String? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return nil }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { return nil }
    return String(decoding: data, as: UTF8.self)
}
