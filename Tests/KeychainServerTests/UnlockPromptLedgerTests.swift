import KeychainModel
import Testing
@testable import KeychainServer

/// unlockPrompt's memory of its prompts (op 53): shared outcomes and the bound on prompts left
/// unanswered, on a made-up clock.
@Suite("The unlock prompt's ledger")
struct UnlockPromptLedgerTests {
    static let cancelled = KeychainError(.userCanceled, "cancelled")

    @Test func aCallerThatWaitedDuringACancelledPromptSharesItsCancel() throws {
        var ledger = UnlockPromptLedger()
        let waiting = try ledger.admit(at: 0)
        ledger.record(Self.cancelled, at: 1)
        #expect(ledger.sharedFailure(since: waiting)?.status == .userCanceled)
        #expect(ledger.sharedFailure(since: try ledger.admit(at: 2)) == nil, "a caller arriving later gets its own prompt")
    }

    @Test func aPromptThatUnlockedSharesNoFailure() throws {
        var ledger = UnlockPromptLedger()
        let waiting = try ledger.admit(at: 0)
        ledger.record(nil, at: 1)
        #expect(ledger.sharedFailure(since: waiting) == nil)
    }

    @Test func threeUnansweredPromptsInARowPauseThePromptsForAMinute() throws {
        var ledger = UnlockPromptLedger()
        for t in 0..<3 {
            _ = try ledger.admit(at: Double(t))
            ledger.record(t == 1 ? KeychainError(.interactionNotAllowed, "pinentry gave up") : Self.cancelled, at: Double(t))
        }
        #expect(throws: KeychainError(.userCanceled, "")) { try ledger.admit(at: 3) }
        _ = try ledger.admit(at: 2 + 60)
    }

    @Test func eachFurtherPauseIsTwiceTheLastUpToAnHour() throws {
        var ledger = UnlockPromptLedger()
        var now = 0.0
        var pauses: [Double] = []
        for _ in 0..<9 {
            for _ in 0..<3 { ledger.record(Self.cancelled, at: now) }
            var wait = 0.0
            while (try? ledger.admit(at: now + wait)) == nil { wait += 1 }
            pauses.append(wait)
            now += wait
        }
        #expect(pauses == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600])
    }

    @Test func wrongPasscodesAreNotCountedHereButAnUnlockEndsTheRun() throws {
        var ledger = UnlockPromptLedger()
        ledger.record(Self.cancelled, at: 0)
        ledger.record(Self.cancelled, at: 0)
        ledger.record(KeychainError(.authFailed, "wrong"), at: 0)  // the passcode's own delays bound these
        ledger.record(nil, at: 0)
        ledger.record(Self.cancelled, at: 0)
        ledger.record(Self.cancelled, at: 0)
        _ = try ledger.admit(at: 0)
    }

    @Test func theUnlockPromptNamesTheProgramAndAsksToUnlockTheKeychain() {
        let text = PromptRequest.unlock(executable: "/usr/bin/curl", pid: 77).description
        #expect(text.hasPrefix("/usr/bin/curl (pid 77) wants to unlock the keychain.\n"), "\(text)")
        #expect(!text.contains("item"))
    }
}
