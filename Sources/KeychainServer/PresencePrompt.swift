import KeychainModel
import PersonPrompt

/// What a prompt tells the person: which program asks (the executable the kernel reports for
/// the connection, never a name the caller gives; where keychaind may not read it, what
/// `HiddenProgram` shows instead), for which item (or to unlock the keychain:
/// unlockPrompt, op 53), and the caller's reason (`u_OpPrompt`). The label and the reason come from the caller, so they are shown escaped:
/// a newline or a direction override in them cannot draw a line that seems to be keychaind's.
struct PromptRequest: Sendable, Equatable {
    let executable: String?
    let pid: Int32
    let label: String?
    let reason: String?
    /// For an authentication context (contextAuthenticate), not for one item.
    var forContext = false
    /// What the caller wants when it is not one item's secret, in keychaind's own words
    /// ("make a backup ..."); nil: the item named by `label`.
    var purpose: String? = nil
    /// Unlocking the whole keychain (op 53) rather than using one item.
    var unlocks = false
    /// What is shown of a caller whose executable cannot be read (nil: its pid alone).
    var hidden: HiddenProgram? = nil

    /// The prompt of unlockPrompt (op 53): no item and no reason, since none is the caller's to give.
    static func unlock(executable: String?, pid: Int32) -> PromptRequest {
        var request = PromptRequest(executable: executable, pid: pid, label: nil, reason: nil)
        request.unlocks = true
        return request
    }

    /// The most of a caller's text shown (in characters), so that it cannot push the
    /// program's name out of the dialog.
    static let shownLimit = 120

    /// The program, by the path the kernel reports: "/usr/bin/curl (pid 42)"; when that cannot
    /// be read, "A program whose executable cannot be read (pid 42, uid 1001 (alice), ...)".
    var program: String {
        if let executable { return "\(Self.shown(executable, limit: 512)) (pid \(pid))" }
        return "A program whose executable cannot be read (pid \(pid)\(hidden.map { ", \($0.shown)" } ?? ""))"
    }

    var description: String {
        if unlocks { return "\(program) wants to unlock the keychain.\nType the keychain passcode to unlock it for every program of yours." }
        var text = "\(program) wants to use "
        if let purpose {
            text = "\(program) wants to \(purpose)."
        } else if forContext {
            text += "keychain items that ask first, for a while, without asking again."
        } else {
            text += label.map { "the keychain item \u{201C}\(Self.shown($0, limit: Self.shownLimit))\u{201D}." } ?? "a keychain item without a label."
        }
        if let reason, !reason.isEmpty { text += "\nIts reason: \(Self.shown(reason, limit: Self.shownLimit))" }
        text += "\nType the keychain passcode to allow it."
        return text
    }

    /// Control and format characters (newlines, bidirectional overrides, zero-width ones) as
    /// visible \u{...} escapes, and at most `limit` characters.
    static func shown(_ text: String, limit: Int) -> String {
        var out = ""
        var count = 0
        for scalar in text.unicodeScalars {
            guard count < limit else { return out + "\u{2026}" }
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator, .surrogate, .privateUse, .unassigned:
                out += "\\u{\(String(scalar.value, radix: 16))}"
            default:
                out.unicodeScalars.append(scalar)
            }
            count += 1
        }
        return out
    }
}

/// The person at the machine asked through pinentry, on the display or terminal of the
/// daemon's `[prompt]`, to TYPE the keychain passcode: presence is a secret a process of the
/// same user does not know, never a yes/no button it could click or answer on a pty.
/// Runs without the store's lock; `check` verifies each passcode typed (through the wrong-
/// passcode delays, so the prompt is no faster a guesser than `keychain unlock`).
struct PresencePrompt: Sendable {
    static let tries = 3

    let program: String
    let environment: [String: String]
    let tty: String?
    let term: String

    /// nil: no way to ask (no pinentry, or no display and no terminal configured).
    init?(_ settings: PromptSettings, searchPath: String? = nil) {
        guard settings.hasPlace, let program = PinentryProgram.find(settings.pinentry, searchPath: searchPath) else { return nil }
        self.program = program
        var environment = ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"]
        environment["DISPLAY"] = settings.display
        environment["WAYLAND_DISPLAY"] = settings.waylandDisplay
        environment["XAUTHORITY"] = settings.xauthority
        if settings.tty != nil { environment["TERM"] = settings.term }
        self.environment = environment
        tty = settings.tty
        term = settings.term
    }

    /// Returns once a passcode passed `check`. errSecUserCanceled (-128) when the person
    /// cancels; `check`'s errSecAuthFailed after `tries` wrong ones (each shown, with any delay
    /// named, before the next try); errSecInteractionNotAllowed when pinentry cannot run.
    /// `timeout`: seconds pinentry waits for the person before it gives up (pinentry's
    /// SETTIMEOUT), which ends the prompt as a failure of the conversation (errSecIO).
    func ask(_ request: PromptRequest, timeout: Int? = nil, check: (SecretBytes) throws(KeychainError) -> Void) throws(KeychainError) {
        let conversation: PinentryConversation
        do {
            conversation = try PinentryConversation(program: program, environment: environment)
        } catch {
            throw KeychainError(.interactionNotAllowed, "cannot ask for the passcode: \(error.message)")
        }
        defer { conversation.bye() }
        if let tty {
            try conversation.command("OPTION ttyname=\(PinentryConversation.percentEncoded(tty))")
            try conversation.command("OPTION ttytype=\(PinentryConversation.percentEncoded(term))")
        }
        if let timeout { try conversation.command("SETTIMEOUT \(timeout)") }
        try conversation.command("SETTITLE keychain")
        try conversation.command("SETDESC \(PinentryConversation.percentEncoded(request.description))")
        try conversation.command("SETPROMPT Passcode:")
        var lastError = KeychainError(.authFailed, "the passcode is not correct")
        for _ in 0..<Self.tries {
            guard let passcode = try conversation.getPin() else {
                throw KeychainError(.userCanceled, "the person at the keychain's prompt cancelled")
            }
            do {
                try check(passcode)
                return
            } catch where error.status == .authFailed {
                lastError = error
                try conversation.command("SETERROR \(PinentryConversation.percentEncoded(error.message))")
            }
        }
        throw lastError
    }
}
