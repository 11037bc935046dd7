import KeychainModel
import Synchronization

/// Wrong application passwords, counted per sealed secret (by its salt, which a backup and a
/// restore keep, so a delete and a restore do not start the count again) on the passcode's
/// schedule (PasscodeThrottle: four free, then 1 min, 5 min, 15 min, 15 min, 1 h): a guesser
/// of one item's password gets a handful of Argon2id runs an hour, from any connection. Kept
/// in keychaind's memory, so it survives reconnections but not a restart (docs/security.md,
/// "The application password"); at most `maxItems` items are tracked, the one whose last
/// failure is oldest going first.
final class ApplicationPasswordThrottle: Sendable {
    static let maxItems = 4096
    private let state = Mutex([[UInt8]: PasscodeThrottle]())

    /// errSecAuthFailed while `item`'s delay is on: checked before any Argon2id runs.
    func check(_ item: [UInt8], at now: Double) throws(KeychainError) {
        let wait = state.withLock { $0[item]?.retryAfter(at: now) ?? 0 }
        guard wait <= 0 else {
            throw KeychainError(.authFailed, "too many wrong application passwords for this item: try again in \(Int(wait.rounded(.up))) s")
        }
    }

    /// Counts a wrong password for `item`: the error to answer.
    func failed(_ item: [UInt8], at now: Double) -> KeychainError {
        let failures = state.withLock { (state) -> Int in
            if state[item] == nil, state.count >= Self.maxItems,
               let oldest = state.min(by: { $0.value.lastFailure < $1.value.lastFailure })?.key {
                state[oldest] = nil
            }
            state[item, default: PasscodeThrottle()].failed(at: now)
            return state[item]!.failures
        }
        let next = PasscodeThrottle.delay(afterFailures: failures)
        return KeychainError(.authFailed, next > 0
            ? "the application password is not correct; \(failures) wrong in a row for this item: next attempt in \(Int(next)) s"
            : "the application password is not correct")
    }

    func succeeded(_ item: [UInt8]) {
        state.withLock { _ = $0.removeValue(forKey: item) }
    }
}
