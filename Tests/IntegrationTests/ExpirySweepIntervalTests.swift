import Foundation
import KeychainClient
import KeychainModel
import Testing

/// `[expiry] sweep_seconds` (issue 27): how often keychaind deletes expired items, which no
/// read returns in the meantime.
@Suite("The expiry sweep's interval", .serialized)
struct ExpirySweepIntervalTests {
    /// No read, list or delete touches the item: only the sweep can have deleted it.
    @Test func aShortIntervalDeletesAnExpiredItemThatNoReadTouched() throws {
        let d = try RunningDaemon(config: "[expiry]\nsweep_seconds = 1")
        try KeychainConnection(socketPath: d.socketPath).add([
            "class": .string("genp"), "svce": .string("s"), "acct": .string("short-lived"), "v_Data": .data(bytes("x")),
            "expd": .date(Date().timeIntervalSince1970 - absoluteTimeIntervalSince1970 + 2)])
        // Bounded to keep a missing sweep from hanging the suite; not a measure of speed.
        var waited = 0
        while !d.log.contains("expiry sweep: 1 expired item(s) deleted") && waited < 600 {
            usleep(100_000)
            waited += 1
        }
        #expect(d.log.contains("expiry sweep: 1 expired item(s) deleted"), "\(d.log)")
    }

    @Test func anIntervalOutsideItsBoundsStopsTheStart() throws {
        for value in ["0", "86401", "\"300\""] {
            let d = try RunningDaemon(config: "[expiry]\nsweep_seconds = \(value)", start: false)
            var env = ProcessInfo.processInfo.environment
            env["KEYCHAIND_INSECURE_FAST_KDF"] = "1"
            let r = try runExecutable("/usr/bin/timeout", ["20", Binaries.keychaind, "--state-dir", d.stateDirectory,
                                                           "--socket", d.socketPath, "--config", d.configPath],
                                      environment: env, input: [])
            #expect(r.status == 78 && r.stderr.contains("sweep_seconds"), "\(value): \(r.stderr)")
        }
    }
}
