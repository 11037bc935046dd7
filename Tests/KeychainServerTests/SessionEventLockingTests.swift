import Testing
@testable import KeychainServer

/// lock_on_session_events: who decides, when the config does not, whether session events lock.
@Suite("Session event locking setting")
struct SessionEventLockingTests {
    @Test func unsetItIsOffForRootAndOwnSessionsForAnyOtherUser() throws {
        #expect(SessionEventLocking.default(forUID: 0) == .off)
        #expect(SessionEventLocking.default(forUID: 1000) == .ownSessions)
        #expect(try DaemonConfig.parse("").lockOnSessionEvents == nil)
    }

    @Test(arguments: [("own-sessions", SessionEventLocking.ownSessions), ("off", .off)])
    func theConfigSetsIt(value: String, setting: SessionEventLocking) throws {
        #expect(try DaemonConfig.parse("lock_on_session_events = \"\(value)\"").lockOnSessionEvents == setting)
    }

    @Test(arguments: ["\"all-sessions\"", "true"])
    func anyOtherValueIsRefusedWithItsLine(value: String) {
        do {
            _ = try DaemonConfig.parse("log_level = \"info\"\nlock_on_session_events = \(value)")
            Issue.record("lock_on_session_events = \(value) was accepted")
        } catch {
            #expect(error.line == 2)
            #expect(error.message.contains("lock_on_session_events must be"))
        }
    }
}
