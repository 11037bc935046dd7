import Testing
@testable import KeychainServer

/// `[expiry] sweep_seconds`: how often expired items are deleted.
@Suite("The expiry sweep's setting")
struct ExpirySweepSettingTests {
    @Test func theIntervalIs300SecondsUnlessSet() throws {
        #expect(try DaemonConfig.parse("").serverConfiguration(stateDirectory: nil, socket: nil).expirySweepSeconds == 300)
        let config = try DaemonConfig.parse("[expiry]\nsweep_seconds = 60\n")
        #expect(config.serverConfiguration(stateDirectory: nil, socket: nil).expirySweepSeconds == 60)
    }

    @Test func anIntervalOutsideOneSecondToADayIsRefusedWithItsLine() {
        for value in ["0", "86401", "-5", "1.5", "\"60\""] {
            #expect(throws: DaemonConfig.ParseError.self, "\(value)") { try DaemonConfig.parse("\n[expiry]\nsweep_seconds = \(value)\n") }
        }
        do {
            _ = try DaemonConfig.parse("\n[expiry]\nsweep_seconds = 0\n")
        } catch {
            #expect(error.line == 3 && error.message.contains("1...86400"), "\(error)")
        }
        #expect(throws: DaemonConfig.ParseError.self) { try DaemonConfig.parse("[expiry]\ninterval = 60\n") }
    }
}
