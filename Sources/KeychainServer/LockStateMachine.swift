import KeychainModel

/// The keychain's lock state (docs/security.md, "Lock states"), as a value type: events take
/// the time they happen at and return what the daemon must do, so every rule (grace period,
/// idle auto-lock) is tested with a made-up clock, without sleeping.
///
///     start --> lockedSinceBoot --unlock--> unlocked --lock/idle--> locked --unlock--> unlocked
///              (no passcode: start --> unlocked, and it stays so)
public struct LockStateMachine: Sendable, Equatable {
    public enum State: String, Sendable {
        case lockedSinceBoot, unlocked, locked
    }

    /// What the daemon must do after an event.
    public enum Action: Sendable, Equatable {
        /// Zero and free the WhenUnlocked class keys (ak, aku, akpu).
        case purgeWhenUnlockedKeys
    }

    public private(set) var state: State
    /// When the current state began (seconds, the daemon's clock).
    public private(set) var since: Double
    /// When the WhenUnlocked keys are to be purged: set on lock, cleared by unlock or purge.
    public private(set) var purgeAt: Double?
    /// Last call from any client, for the idle auto-lock.
    public private(set) var lastActivity: Double
    public let gracePeriod: Double
    /// 0: no idle auto-lock.
    public let autoLockAfter: Double

    public init(hasPasscode: Bool, at now: Double, gracePeriod: Double, autoLockAfter: Double) {
        state = hasPasscode ? .lockedSinceBoot : .unlocked
        since = now
        lastActivity = now
        self.gracePeriod = gracePeriod
        self.autoLockAfter = autoLockAfter
    }

    /// The passcode was verified and the class keys loaded.
    public mutating func unlocked(at now: Double) {
        if state != .unlocked { since = now }
        state = .unlocked
        purgeAt = nil
        lastActivity = now
    }

    /// A lock event (the lock call, a host signal, the idle time-out). With a grace period the
    /// keys stay until it ends; without one they go now.
    public mutating func lock(at now: Double) -> [Action] {
        guard state == .unlocked else { return [] }
        state = .locked
        since = now
        if gracePeriod <= 0 {
            purgeAt = nil
            return [.purgeWhenUnlockedKeys]
        }
        purgeAt = now + gracePeriod
        return []
    }

    /// A passcode was set: nothing changes until the next lock. Removed: the keychain can no
    /// longer be locked, so it is unlocked for good.
    public mutating func passcodeRemoved(at now: Double) {
        unlocked(at: now)
    }

    /// Any client call.
    public mutating func activity(at now: Double) {
        lastActivity = now
    }

    /// Time-driven transitions: the end of a grace period, the idle auto-lock.
    public mutating func tick(at now: Double, hasPasscode: Bool) -> [Action] {
        var actions: [Action] = []
        if state == .unlocked, hasPasscode, autoLockAfter > 0, now - lastActivity >= autoLockAfter {
            actions += lock(at: now)
        }
        if let purgeAt, now >= purgeAt {
            self.purgeAt = nil
            actions.append(.purgeWhenUnlockedKeys)
        }
        return actions
    }

    /// When `tick` next has something to do, if ever.
    public func nextDeadline(hasPasscode: Bool) -> Double? {
        var deadlines: [Double] = []
        if let purgeAt { deadlines.append(purgeAt) }
        if state == .unlocked, hasPasscode, autoLockAfter > 0 { deadlines.append(lastActivity + autoLockAfter) }
        return deadlines.min()
    }

    /// Whether the class key of `pdmn` may be in memory now: the rule the keybag is held to
    /// after every event, so that the two can never disagree. Always classes always; with
    /// no passcode everything; unlocked everything; lockedSinceBoot nothing else; locked the
    /// AfterFirstUnlock classes, and the WhenUnlocked ones only until the grace period ends.
    public func mayHoldKey(_ pdmn: Protection, hasPasscode: Bool) -> Bool {
        guard hasPasscode, pdmn.isPasscodeProtected else { return true }
        switch state {
        case .unlocked: return true
        case .lockedSinceBoot: return false
        case .locked: return !pdmn.isPurgedOnLock || purgeAt != nil
        }
    }

    /// Seconds until the idle auto-lock, or nil when none is due.
    public func secondsUntilAutoLock(at now: Double, hasPasscode: Bool) -> Double? {
        guard state == .unlocked, hasPasscode, autoLockAfter > 0 else { return nil }
        return max(0, lastActivity + autoLockAfter - now)
    }
}

/// Wrong-passcode throttling: Apple's escalating delays (shared/reference, 6.6), kept in the
/// database so that a restart does not reset them. The delay counts from the last failure.
public struct PasscodeThrottle: Sendable, Equatable {
    public private(set) var failures: Int
    /// When the last failure happened (seconds since 1970, wall clock: it must survive restarts).
    public private(set) var lastFailure: Double

    public init(failures: Int = 0, lastFailure: Double = 0) {
        self.failures = failures
        self.lastFailure = lastFailure
    }

    /// The delay after `failures` consecutive failures: none for 1-4, then 1 min, 5 min,
    /// 15 min, 15 min, and 1 hour from the 9th on.
    public static func delay(afterFailures n: Int) -> Double {
        switch n {
        case ..<5: 0
        case 5: 60
        case 6: 5 * 60
        case 7, 8: 15 * 60
        default: 60 * 60
        }
    }

    /// Seconds before another attempt is allowed (0: now).
    public func retryAfter(at now: Double) -> Double {
        let wait = lastFailure + Self.delay(afterFailures: failures) - now
        return wait > 0 ? wait : 0
    }

    public mutating func failed(at now: Double) {
        failures += 1
        lastFailure = now
    }

    public mutating func succeeded() {
        failures = 0
        lastFailure = 0
    }
}
