import KeychainModel

/// What unlockPrompt (op 53) remembers of its prompts, so that callers waiting at once share
/// one prompt, and no caller keeps prompts coming forever. One per daemon: the daemon is one
/// user's, and one person answers its prompts.
///
/// - Callers that waited while an unlock prompt was shown take its outcome: unlocked, they
///   succeed without asking; cancelled or unanswered, they get the same code. So eight threads
///   of a TLS server logging in at once see one prompt, not eight.
/// - After `cancelsBeforePause` prompts in a row end without a passcode (cancelled, or pinentry
///   gave up), no prompt is shown for a pause that doubles each time (1 min, 2, 4... up to
///   1 h); a passcode that unlocks ends the run. Wrong passcodes are bounded by the passcode's
///   own delays, which they count in.
struct UnlockPromptLedger: Sendable {
    static let cancelsBeforePause = 3
    static let firstPause: Double = 60
    static let longestPause: Double = 3600

    /// A caller's place: the prompts that had ended when it arrived.
    struct Ticket: Sendable {
        fileprivate let ended: UInt64
    }

    private var ended: UInt64 = 0
    /// The failure of the last prompt that ended (nil: it unlocked).
    private var lastFailure: KeychainError?
    private var unansweredInARow = 0
    private var pauses = 0
    private var pausedUntil: Double = 0

    /// A caller arrives (monotonic seconds): errSecUserCanceled during a pause.
    func admit(at now: Double) throws(KeychainError) -> Ticket {
        let wait = pausedUntil - now
        guard wait <= 0 else {
            throw KeychainError(.userCanceled, "the last \(Self.cancelsBeforePause) unlock prompts were cancelled or unanswered: keychaind shows no other for \(Int(wait.rounded(.up))) s; `keychain unlock` unlocks meanwhile")
        }
        return Ticket(ended: ended)
    }

    /// The failure of an unlock prompt that ended while the ticket's caller waited, which it
    /// shares; nil when none ended or the last one unlocked.
    func sharedFailure(since ticket: Ticket) -> KeychainError? {
        ended == ticket.ended ? nil : lastFailure
    }

    /// A prompt ended: nil when it unlocked, else its failure.
    mutating func record(_ failure: KeychainError?, at now: Double) {
        ended &+= 1
        lastFailure = failure
        guard let failure else {
            unansweredInARow = 0
            pauses = 0
            return
        }
        guard Self.leftUnanswered(failure) else { return }
        unansweredInARow += 1
        if unansweredInARow >= Self.cancelsBeforePause {
            pausedUntil = now + min(Self.longestPause, Self.firstPause * Double(1 << min(pauses, 16)))
            pauses += 1
            unansweredInARow = 0
        }
    }

    /// Cancelled, or pinentry gave up (its own timeout, a closed window): what a flood of
    /// prompts gets from a person who does not want them.
    private static func leftUnanswered(_ failure: KeychainError) -> Bool {
        failure.status == .userCanceled || failure.status == .interactionNotAllowed
    }
}
