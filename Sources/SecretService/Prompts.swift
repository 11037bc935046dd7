#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainClient
import PersonPrompt
import Synchronization

/// An Unlock prompt (spec §8): made by Unlock, run once by its owner's Prompt(window-id),
/// answered with the Completed signal.
struct UnlockPrompt {
    let owner: String
    let caller: CallerIdentity
    /// What Unlock was asked to unlock: the result when it succeeds.
    let objects: [String]
    /// Items that ask first, read for the caller once the person says yes; empty for the
    /// unlock of the keychain itself.
    var asking: [AskingItem] = []
    var started = false
    /// The prompt unlocked the keychain and goes on asking for `asking` (LockCalls.swift).
    var unlockedKeychain = false
}

/// A prompt's outcome, handed from its thread to the bus thread.
struct PromptOutcome: Sendable {
    let path: String
    let dismissed: Bool
    /// What the person allowed the prompt's owner to read (items that ask first).
    var granted: [GrantedSecret] = []
}

/// Where prompt threads leave their outcomes for the bus thread, which sd-bus requires to be
/// the only one sending: a queue under a lock, and a pipe whose read end is in the bus
/// thread's poll set to wake it.
final class PromptMailbox: Sendable {
    private let outcomes = Mutex<[PromptOutcome]>([])
    let wakeRead: Int32
    private let wakeWrite: Int32

    init() throws(KeychainError) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            throw SystemCallError.current("pipe").keychainError("cannot make the prompt mailbox")
        }
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
        }
        wakeRead = ends[0]
        wakeWrite = ends[1]
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    func post(_ outcome: PromptOutcome) {
        outcomes.withLock { $0.append(outcome) }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// Everything posted so far (the bus thread calls this when woken).
    func take() -> [PromptOutcome] {
        var drain = [UInt8](repeating: 0, count: 64)
        while read(wakeRead, &drain, drain.count) > 0 {}
        return outcomes.withLock { taken in
            defer { taken = [] }
            return taken
        }
    }
}

/// The dialog of one unlock: pinentry asks for the passcode, keychaind checks it for the
/// caller (asCaller(unlock), an admin call), up to three tries; wrong ones are shown with
/// keychaind's message (which names any delay). Runs on its own thread with its own keychaind
/// connection, so the bus keeps being served meanwhile.
struct UnlockDialog: Sendable {
    static let tries = 3

    let pinentry: String
    let keychain: DelegatedKeychain
    let windowID: String
    let description: String

    /// Whether the keychain was unlocked (false: cancelled, failed or pinentry unusable).
    func run() -> Bool {
        do {
            let conversation = try PinentryConversation(program: pinentry)
            defer { conversation.bye() }
            if !windowID.isEmpty, windowID.allSatisfy(\.isNumber) {
                try? conversation.command("OPTION parent-wid=\(windowID)")
            }
            try conversation.command("SETTITLE keychain")
            try conversation.command("SETDESC \(PinentryConversation.percentEncoded(description))")
            try conversation.command("SETPROMPT Passcode:")
            for _ in 0..<Self.tries {
                guard let pin = try conversation.getPin() else {
                    BridgeLog.info("unlock prompt cancelled")
                    return false
                }
                do {
                    try keychain.unlock(passcode: pin)
                    return true
                } catch where error.status == .authFailed {
                    try conversation.command("SETERROR \(PinentryConversation.percentEncoded(error.message))")
                }
            }
            BridgeLog.info("unlock prompt: \(Self.tries) wrong passcodes")
            return false
        } catch {
            BridgeLog.error("unlock prompt failed: \(error.message)")
            return false
        }
    }

    /// The pinentry to use: `configured` if given, else `pinentry` on PATH; nil if none.
    static func findPinentry(_ configured: String?) -> String? { PinentryProgram.find(configured) }
}
