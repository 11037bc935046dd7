#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import Synchronization
import Testing
@testable import KeychainServer
@testable import KeychainStore

/// A made-up clock shared by the handler and the test: wall time is monotonic time plus a
/// fixed offset, so wrong-passcode delays run on it too.
final class FakeTime: Sendable {
    private let seconds = Mutex<Double>(1_000)
    var now: Double { seconds.withLock { $0 } }
    func set(_ t: Double) { seconds.withLock { $0 = t } }
    var clock: DaemonClock {
        DaemonClock(monotonic: { self.now }, wall: { self.now + 1_700_000_000 })
    }
}

/// SplitMix64: a seeded generator, so that a failing sequence can be replayed from its seed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// What the keychain promises, written independently of the daemon: which classes can be
/// read after any sequence of events (docs/security.md, "Lock states").
struct LockModel {
    enum State: String { case lockedSinceBoot, unlocked, locked }
    static let grace = 10.0
    static let autoLock = 300.0

    var passcode: [UInt8]?
    var state = State.unlocked
    var lockedAt = 0.0
    var lastActivity = 0.0
    var failures = 0
    var lastFailure = 0.0

    func readable(_ pdmn: Protection, at now: Double) -> Bool {
        if pdmn == .whenPasscodeSetThisDeviceOnly && passcode == nil { return false }
        guard pdmn.isPasscodeProtected, passcode != nil else { return true }
        switch state {
        case .unlocked: return true
        case .lockedSinceBoot: return false
        case .locked: return !pdmn.isPurgedOnLock || now < lockedAt + Self.grace
        }
    }

    /// A passcode check under the wrong-passcode delays: refused while a delay is in force; a
    /// wrong passcode counts; a right one resets the count. Whether it passed.
    mutating func checkPasscode(right: Bool, at now: Double) -> Bool {
        guard lastFailure + PasscodeThrottle.delay(afterFailures: failures) <= now else { return false }
        if right {
            failures = 0
            return true
        }
        failures += 1
        lastFailure = now
        return false
    }

    /// Time passing: the idle auto-lock fires at its deadline.
    mutating func advance(to now: Double) {
        if state == .unlocked, passcode != nil, now >= lastActivity + Self.autoLock {
            state = .locked
            lockedAt = lastActivity + Self.autoLock
        }
    }
}

@Suite("The keybag never holds a key the lock state forbids")
struct LockInvariantTests {
    enum Step: CaseIterable {
        case lock, unlockRight, unlockWrong, set, changeRight, changeWrong, removeRight, removeWrong, restart,
             shortWait, graceWait, longWait
    }

    static let passcodes: [[UInt8]] = [Array("1111".utf8), Array("2222".utf8), Array("3333".utf8)]

    final class Harness {
        let directory: String
        let time = FakeTime()
        var handler: RequestHandler!
        let caller = Caller(pid: getpid(), uid: getuid(), gid: getgid(), executable: nil)
        let policy = AccessPolicy()
        let lockPolicy: LockPolicy

        init(grace: Double = LockModel.grace, autoLock: Double = LockModel.autoLock) throws {
            var policy = LockPolicy()
            policy.gracePeriod = grace
            policy.autoLockAfter = autoLock
            lockPolicy = policy
            var template = Array("/tmp/kclock.XXXXXX".utf8CString)
            guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp failed") }
            directory = String(cString: p)
            try open()
        }

        func open() throws {
            handler = nil
            let store = try ItemStore(configuration: StoreConfiguration(stateDirectory: directory, argon2: .testingOnly))
            handler = try RequestHandler(store: store, lockPolicy: lockPolicy, clock: time.clock, log: { _ in })
        }

        /// Moves the clock to `t`, running the timer's ticks at each deadline on the way, as
        /// the daemon's timer thread does.
        func advance(to t: Double) {
            while let deadline = handler.nextDeadline(), deadline <= t {
                time.set(max(time.now, deadline + 1e-6))
                handler.tick()
            }
            time.set(t)
            handler.tick()
        }

        func call(_ request: Request) -> Int32 {
            handler.handle(request, from: caller, policy: policy).status
        }

        deinit {
            handler = nil
            try? FileManager.default.removeItem(atPath: directory)
        }
    }

    func item(_ pdmn: Protection) -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("lock-model"), "acct": .string(pdmn.rawValue)]
    }

    @Test(arguments: 1...12)
    func randomSequencesKeepKeybagAndLockStateInAgreement(seed: UInt64) throws {
        var rng = SeededGenerator(state: seed)
        let h = try Harness()
        var model = LockModel()
        // One readable item per class that can exist without a passcode.
        for pdmn in Protection.allCases where pdmn != .whenPasscodeSetThisDeviceOnly {
            var add = item(pdmn)
            add["pdmn"] = .string(pdmn.rawValue)
            add["v_Data"] = .data(Array(pdmn.rawValue.utf8))
            #expect(h.call(.add(add)) == 0)
        }
        model.lastActivity = h.time.now
        var trail: [String] = []
        for _ in 0..<60 {
            let step = Step.allCases.randomElement(using: &rng)!
            let right = model.passcode ?? Self.passcodes[0]
            let wrong = Self.passcodes.first { $0 != right }!
            let next = Self.passcodes.randomElement(using: &rng)!
            let now = h.time.now
            trail.append("\(step)")
            switch step {
            case .lock:
                let status = h.call(.lock)
                let ok = model.passcode != nil
                if ok && model.state == .unlocked {
                    model.state = .locked
                    model.lockedAt = now
                }
                #expect((status == 0) == ok, "\(trail)")
            case .unlockRight, .unlockWrong:
                let status = h.call(.unlock(passcode: step == .unlockRight ? right : wrong))
                // Without a passcode there is nothing to check: unlock succeeds and does nothing.
                let ok = model.passcode == nil || model.checkPasscode(right: step == .unlockRight, at: now)
                if ok && model.passcode != nil { model.state = .unlocked }
                #expect((status == 0) == ok, "\(trail)")
            case .set:
                let status = h.call(.setPasscode(new: next))
                let ok = model.passcode == nil
                if ok { model.passcode = next }
                #expect((status == 0) == ok, "\(trail)")
            case .changeRight, .changeWrong:
                let status = h.call(.changePasscode(old: step == .changeRight ? right : wrong, new: next))
                let ok = model.passcode != nil && model.checkPasscode(right: step == .changeRight, at: now)
                if ok { model.passcode = next }  // and nothing about the lock state changes
                #expect((status == 0) == ok, "\(trail)")
            case .removeRight, .removeWrong:
                let status = h.call(.removePasscode(current: step == .removeRight ? right : wrong))
                let ok = model.passcode != nil && model.checkPasscode(right: step == .removeRight, at: now)
                if ok {
                    model.passcode = nil
                    model.state = .unlocked
                }
                #expect((status == 0) == ok, "\(trail)")
            case .restart:
                try h.open()
                model.state = model.passcode == nil ? .unlocked : .lockedSinceBoot
                model.lastActivity = now
            case .shortWait, .graceWait, .longWait:
                let dt: Double = switch step {
                case .shortWait: Double.random(in: 0.5...5, using: &rng)
                case .graceWait: Double.random(in: 9...12, using: &rng)
                default: Double.random(in: 250...4_000, using: &rng)
                }
                model.advance(to: now + dt)
                h.advance(to: now + dt)
            }
            // Any call but status counts as activity for the idle auto-lock.
            switch step {
            case .restart, .shortWait, .graceWait, .longWait: break
            default: model.lastActivity = now
            }
            try check(h, model, trail)
        }
    }

    /// Every class key loaded exactly when the model says the class is readable, the state
    /// the daemon reports is the model's, and real reads agree.
    func check(_ h: Harness, _ model: LockModel, _ trail: [String]) throws {
        let now = h.time.now
        for pdmn in Protection.allCases {
            #expect(h.handler.store.isAvailable(pdmn) == model.readable(pdmn, at: now),
                    "\(pdmn.rawValue) after \(trail)")
        }
        let status = h.handler.handle(.status, from: h.caller, policy: h.policy)
        guard case .single(.attributes(let info)) = status.result else { throw KeychainError(.decode, "no status") }
        #expect(info["state"] == .string(model.state.rawValue), "state after \(trail)")
        for pdmn in [Protection.whenUnlocked, .afterFirstUnlock] {
            var query = item(pdmn)
            query["r_Data"] = .bool(true)
            let read = h.handler.store.isAvailable(pdmn)
            do {
                _ = try h.handler.store.items.copyMatching(query, scope: h.policy.scope(for: h.caller))
                #expect(read, "\(pdmn.rawValue) was read while its key is gone, after \(trail)")
            } catch {
                #expect(!read && error.status == .interactionNotAllowed, "\(pdmn.rawValue): \(error) after \(trail)")
            }
        }
    }

    // The two reported sequences, as plain regressions.

    func unlockedHarnessWithPasscode() throws -> Harness {
        let h = try Harness()
        for pdmn in [Protection.whenUnlocked, .afterFirstUnlock] {
            var add = item(pdmn)
            add["pdmn"] = .string(pdmn.rawValue)
            add["v_Data"] = .data([1, 2, 3])
            #expect(h.call(.add(add)) == 0)
        }
        #expect(h.call(.setPasscode(new: Self.passcodes[0])) == 0)
        return h
    }

    @Test func changingThePasscodeAfterARestartLeavesTheKeychainLockedSinceBoot() throws {
        let h = try unlockedHarnessWithPasscode()
        try h.open()
        #expect(h.call(.changePasscode(old: Self.passcodes[0], new: Self.passcodes[1])) == 0)
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(!h.handler.store.isAvailable(.afterFirstUnlock))
        #expect(h.call(.unlock(passcode: Self.passcodes[1])) == 0)
        #expect(h.handler.store.isAvailable(.whenUnlocked))
    }

    @Test func changingThePasscodeAfterTheGracePeriodLeavesWhenUnlockedItemsLocked() throws {
        let h = try unlockedHarnessWithPasscode()
        #expect(h.call(.lock) == 0)
        h.advance(to: h.time.now + LockModel.grace + 1)
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(h.call(.changePasscode(old: Self.passcodes[0], new: Self.passcodes[1])) == 0)
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(h.handler.store.isAvailable(.afterFirstUnlock))
    }

    @Test func anEraseAfterWrongPasscodesWhileLockedSinceBootLeavesAnUnlockedKeychainWithEveryKeyItsStateAllows() throws {
        let h = try unlockedHarnessWithPasscode()
        var policy = h.lockPolicy
        policy.eraseAfterFailures = 3
        h.handler = nil
        h.handler = try RequestHandler(
            store: try ItemStore(configuration: StoreConfiguration(stateDirectory: h.directory, argon2: .testingOnly)),
            lockPolicy: policy, clock: h.time.clock, log: { _ in })
        for _ in 1...3 { #expect(h.call(.unlock(passcode: Self.passcodes[1])) != 0) }
        #expect(!h.handler.store.hasPasscode)
        for pdmn in Protection.allCases where pdmn != .whenPasscodeSetThisDeviceOnly {
            #expect(h.handler.store.isAvailable(pdmn), "\(pdmn.rawValue)")
        }
        #expect(!h.handler.store.isAvailable(.whenPasscodeSetThisDeviceOnly))
    }

    @Test func aBackupWhileLockedIsRefusedAndLoadsNoKey() throws {
        let h = try unlockedHarnessWithPasscode()
        try h.open()  // locked since boot
        #expect(h.call(.backupBegin(password: Array("backup-pw".utf8))) == KeychainStatus.interactionNotAllowed.rawValue)
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(!h.handler.store.isAvailable(.afterFirstUnlock))
    }
}
