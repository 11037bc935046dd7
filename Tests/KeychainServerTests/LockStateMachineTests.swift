import Testing
@testable import KeychainServer

@Suite("The lock state machine, on a made-up clock")
struct LockStateMachineTests {
    func machine(passcode: Bool = true, grace: Double = 10, autoLock: Double = 0) -> LockStateMachine {
        LockStateMachine(hasPasscode: passcode, at: 100, gracePeriod: grace, autoLockAfter: autoLock)
    }

    @Test func startsLockedSinceBootWithAPasscodeAndUnlockedWithout() {
        #expect(machine(passcode: true).state == .lockedSinceBoot)
        #expect(machine(passcode: false).state == .unlocked)
    }

    @Test func unlockThenLockKeepsTheKeysForTheGracePeriod() {
        var m = machine(grace: 10)
        m.unlocked(at: 110)
        #expect(m.state == .unlocked && m.since == 110)
        #expect(m.lock(at: 120) == [])
        #expect(m.state == .locked)
        #expect(m.tick(at: 129.9, hasPasscode: true) == [])
        #expect(m.nextDeadline(hasPasscode: true) == 130)
        #expect(m.tick(at: 130, hasPasscode: true) == [.purgeWhenUnlockedKeys])
        #expect(m.tick(at: 140, hasPasscode: true) == [])  // purged once
    }

    @Test func unlockingDuringTheGracePeriodCancelsThePurge() {
        var m = machine(grace: 10)
        m.unlocked(at: 110)
        _ = m.lock(at: 120)
        m.unlocked(at: 125)
        #expect(m.tick(at: 131, hasPasscode: true) == [])
        #expect(m.nextDeadline(hasPasscode: true) == nil)
    }

    @Test func zeroGracePurgesAtOnce() {
        var m = machine(grace: 0)
        m.unlocked(at: 110)
        #expect(m.lock(at: 111) == [.purgeWhenUnlockedKeys])
    }

    @Test func lockingWhileLockedDoesNothing() {
        var m = machine(grace: 0)
        #expect(m.lock(at: 101) == [])
        #expect(m.state == .lockedSinceBoot)
        m.unlocked(at: 102)
        _ = m.lock(at: 103)
        #expect(m.lock(at: 104) == [])
        #expect(m.since == 103)
    }

    @Test func idleAutoLockFiresAfterTheLastActivity() {
        var m = machine(grace: 0, autoLock: 60)
        m.unlocked(at: 100)
        m.activity(at: 130)
        #expect(m.secondsUntilAutoLock(at: 150, hasPasscode: true) == 40)
        #expect(m.tick(at: 189, hasPasscode: true) == [])
        #expect(m.tick(at: 190, hasPasscode: true) == [.purgeWhenUnlockedKeys])
        #expect(m.state == .locked)
    }

    @Test func noAutoLockWithoutAPasscode() {
        var m = machine(passcode: false, autoLock: 60)
        #expect(m.tick(at: 1_000, hasPasscode: false) == [])
        #expect(m.state == .unlocked)
        #expect(m.nextDeadline(hasPasscode: false) == nil)
    }

    @Test func removingThePasscodeUnlocksForGood() {
        var m = machine()
        m.passcodeRemoved(at: 105)
        #expect(m.state == .unlocked)
    }
}

@Suite("Escalating delays after wrong passcodes")
struct PasscodeThrottleTests {
    @Test(arguments: [(1, 0.0), (4, 0), (5, 60), (6, 300), (7, 900), (8, 900), (9, 3600), (20, 3600)])
    func appleSchedule(failures: Int, delay: Double) {
        #expect(PasscodeThrottle.delay(afterFailures: failures) == delay)
    }

    @Test func theDelayCountsFromTheLastFailure() {
        var t = PasscodeThrottle()
        for i in 0..<5 { t.failed(at: 1_000 + Double(i)) }
        #expect(t.retryAfter(at: 1_004) == 60)
        #expect(t.retryAfter(at: 1_034) == 30)
        #expect(t.retryAfter(at: 1_064) == 0)
    }

    @Test func successResetsTheCount() {
        var t = PasscodeThrottle(failures: 7, lastFailure: 1_000)
        t.succeeded()
        #expect(t.failures == 0 && t.retryAfter(at: 1_000) == 0)
    }
}
