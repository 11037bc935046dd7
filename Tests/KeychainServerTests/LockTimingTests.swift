import KeychainModel
import KeychainProtocol
import Testing
@testable import KeychainServer

/// Grace periods and the idle auto-lock on a manual clock: the rules, without sleeping (the
/// grace period is also tested end to end, on real time, in LockStateTests).
@Suite("Lock timing on a manual clock")
struct LockTimingTests {
    typealias Harness = LockInvariantTests.Harness
    let passcode = Array("1234".utf8)

    func unlocked(grace: Double = 10, autoLock: Double = 0) throws -> Harness {
        let h = try Harness(grace: grace, autoLock: autoLock)
        #expect(h.call(.add(["class": .string("genp"), "svce": .string("timing"), "acct": .string("ak"),
                             "pdmn": .string("ak"), "v_Data": .data([1])])) == 0)
        #expect(h.call(.setPasscode(new: passcode)) == 0)
        return h
    }

    func status(_ h: Harness) -> AttributeDictionary {
        guard case .single(.attributes(let info)) = h.handler.handle(.status, from: h.caller, policy: h.policy).result else { return [:] }
        return info
    }

    @Test func unlockingWithinTheGracePeriodKeepsTheKeys() throws {
        let h = try unlocked(grace: 10)
        #expect(h.call(.lock) == 0)
        h.advance(to: h.time.now + 5)
        #expect(h.call(.unlock(passcode: passcode)) == 0)
        h.advance(to: h.time.now + 60)
        #expect(h.handler.store.isAvailable(.whenUnlocked))
        #expect(status(h)["state"] == .string("unlocked"))
    }

    @Test func theGracePeriodEndsExactlyOnTime() throws {
        let h = try unlocked(grace: 10)
        #expect(h.call(.lock) == 0)
        #expect(status(h)["purge_in"] == .int(10))
        h.advance(to: h.time.now + 9.9)
        #expect(h.handler.store.isAvailable(.whenUnlocked))
        h.advance(to: h.time.now + 0.2)
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(h.handler.store.isAvailable(.afterFirstUnlock))
    }

    @Test func idleAutoLockLocksAfterTheConfiguredSilence() throws {
        let h = try unlocked(grace: 0, autoLock: 60)
        #expect(h.call(.unlock(passcode: passcode)) == 0)
        #expect(status(h)["auto_lock_in"] == .int(60))
        h.advance(to: h.time.now + 59)
        #expect(status(h)["state"] == .string("unlocked"))
        h.advance(to: h.time.now + 2)
        #expect(status(h)["state"] == .string("locked"))
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
    }

    @Test func anyCallButStatusPostponesTheAutoLock() throws {
        let h = try unlocked(grace: 0, autoLock: 60)
        #expect(h.call(.unlock(passcode: passcode)) == 0)
        for _ in 0..<10 {  // a status every 10 s: not activity
            h.advance(to: h.time.now + 10)
            _ = status(h)
        }
        #expect(status(h)["state"] == .string("locked"))
        #expect(h.call(.unlock(passcode: passcode)) == 0)
        for _ in 0..<10 {  // a read every 30 s: activity
            h.advance(to: h.time.now + 30)
            #expect(h.call(.copyMatching(["class": .string("genp"), "svce": .string("timing")])) == 0)
        }
        #expect(status(h)["state"] == .string("unlocked"))
    }
}
