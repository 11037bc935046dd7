#if canImport(Glibc)
import Glibc
#endif
import DBus
import KeychainModel

/// The process polkit is asked about: the caller as the kernel named it (SO_PEERCRED's pid and
/// uid, and the start time read when it connected), never what the caller says. The start
/// time makes the subject one process: a pid reused by another one after the caller exited
/// does not match it, and polkitd refuses such a subject.
struct PolkitSubject: Sendable, Equatable {
    let pid: Int32
    let startTime: UInt64
    let uid: UInt32

    /// polkit's `unix-process` subject, `(sa{sv})` with pid (u), start-time (t) and uid (i).
    var busValue: BusValue {
        .structure([.string("unix-process"), .variantDictionary([
            "pid": .uint32(UInt32(bitPattern: pid)),
            "start-time": .uint64(startTime),
            "uid": .int32(Int32(bitPattern: uid)),
        ])])
    }
}

/// One org.freedesktop.PolicyKit1.Authority.CheckAuthorization of keychaind's action for a
/// prompt: the details polkit puts into the action's message (the program by the path the
/// kernel reports, or what `HiddenProgram` shows where that cannot be read, the item's label
/// and the caller's reason, each escaped as pinentry's text is, so that a newline or a
/// direction override from the caller draws nothing).
struct PolkitCheck: Sendable, Equatable {
    static let action = "org.keychaind.confirm-item-use"
    /// CheckAuthorizationFlags.AllowUserInteraction.
    static let allowUserInteraction: UInt32 = 1

    let subject: PolkitSubject
    let details: [String: String]
    /// Whether polkit may ask the person (through an authentication agent) before answering.
    let interactive: Bool
    /// Names this check for CancelCheckAuthorization; "" for a check that cannot wait on anyone.
    let cancellationID: String

    init(_ request: PromptRequest, subject: PolkitSubject, interactive: Bool, cancellationID: String = "") {
        self.subject = subject
        details = Self.details(for: request)
        self.interactive = interactive
        self.cancellationID = interactive ? cancellationID : ""
    }

    /// `program`, `item` and `reason` for whoever writes a rule or an agent that shows them
    /// apart (with `uid`, `user`, `unit` and `command` for a program whose executable cannot
    /// be read); `request`, the whole question in keychaind's words, for the action's message.
    static func details(for request: PromptRequest) -> [String: String] {
        var details = [
            "program": request.executable.map { PromptRequest.shown($0, limit: 512) } ?? "",
            "pid": String(request.pid),
            "item": request.label.map { PromptRequest.shown($0, limit: PromptRequest.shownLimit) } ?? "",
            "reason": request.reason.map { PromptRequest.shown($0, limit: PromptRequest.shownLimit) } ?? "",
        ]
        if request.executable == nil, let hidden = request.hidden {
            details["uid"] = String(hidden.uid)
            details["user"] = hidden.userName.map { PromptRequest.shown($0, limit: 64) } ?? ""
            details["unit"] = hidden.unit.map { PromptRequest.shown($0.description, limit: 256) } ?? ""
            details["command"] = hidden.command.map { PromptRequest.shown($0, limit: 16) } ?? ""
        }
        // The description without its last line, which tells the person to type the keychain
        // passcode: polkit's agent asks for the person's own password.
        var lines = request.description.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.count > 1 { lines.removeLast() }
        details["request"] = lines.joined(separator: "\n")
        return details
    }

    /// CheckAuthorization's arguments: subject, action_id, details, flags, cancellation_id.
    var arguments: [BusValue] {
        [subject.busValue, .string(Self.action), .stringDictionary(details),
         .uint32(interactive ? Self.allowUserInteraction : 0), .string(cancellationID)]
    }
}

/// What CheckAuthorization answered: `(bba{ss})`.
struct PolkitResult: Sendable, Equatable {
    let authorized: Bool
    /// Not authorized yet, but the subject could be after authenticating (auth_self): with
    /// AllowUserInteraction, polkit answers so when no authentication agent can reach it.
    let challenge: Bool
    let details: [String: String]

    init(authorized: Bool, challenge: Bool, details: [String: String] = [:]) {
        self.authorized = authorized
        self.challenge = challenge
        self.details = details
    }

    init(_ value: BusValue) throws(KeychainError) {
        guard case .structure(let members) = value, members.count == 3,
              let authorized = members[0].boolValue, let challenge = members[1].boolValue,
              let details = members[2].stringDictionaryValue else {
            throw KeychainError(.decode, "polkit's CheckAuthorization answered something other than (bba{ss})")
        }
        self.init(authorized: authorized, challenge: challenge, details: details)
    }

    /// The person closed the agent's dialog (polkit.dismissed).
    var dismissed: Bool { details["polkit.dismissed"].map { !$0.isEmpty && $0 != "false" } ?? false }
}

/// How one ask through polkit ended.
enum PolkitOutcome: Sendable, Equatable {
    /// The person typed their password into an agent polkit chose for the caller.
    case allowed
    /// The person was asked and did not allow it (cancelled, wrong password, no answer in time).
    case refused(KeychainError)
    /// polkit cannot ask anyone for this caller (no polkitd, no agent, no active local session,
    /// the action not installed, keychaind not the action's owner): another prompt may ask.
    case unavailable(String)

    /// The answer to the first check, made without AllowUserInteraction: only a challenge
    /// means a person could authenticate. A yes here came from nobody (a rule answering YES,
    /// or an authorization kept from before), so it does not count as presence.
    static func ofProbe(_ result: PolkitResult) -> PolkitOutcome? {
        if result.authorized {
            return .unavailable("polkit answers \(PolkitCheck.action) without asking anyone (a rule says yes, or an authorization is kept), which is no one's presence")
        }
        guard result.challenge else {
            return .unavailable("polkit does not let this caller authenticate for \(PolkitCheck.action) (it is not in an active local session, a rule says no, or the action is not installed)")
        }
        return nil
    }

    /// The answer to the check that may ask the person.
    static func ofCheck(_ result: PolkitResult) -> PolkitOutcome {
        if result.authorized { return .allowed }
        if result.challenge { return .unavailable("no polkit authentication agent can reach the caller's session") }
        if result.dismissed { return .refused(KeychainError(.userCanceled, "the person dismissed polkit's prompt")) }
        return .refused(KeychainError(.userCanceled, "polkit's prompt ended without the person's password (cancelled or wrong)"))
    }

    /// A D-Bus error in place of polkit's answer.
    static func ofError(name: String, message: String) -> PolkitOutcome {
        switch name {
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner":
            return .unavailable("no polkitd on the system bus")
        case "org.freedesktop.PolicyKit1.Error.NotAuthorized":
            // Only uid 0 and the action's owners (org.freedesktop.policykit.owner) may check for
            // another user's process or pass details: a keychaind running as that user is neither.
            return .unavailable("polkitd refuses keychaind's check (\(message)): keychaind's user must be root or an owner of \(PolkitCheck.action)")
        case "org.freedesktop.PolicyKit1.Error.Cancelled":
            return .refused(KeychainError(.userCanceled, "polkit's prompt was cancelled"))
        default:
            return .unavailable("polkitd answered \(name): \(message)")
        }
    }
}

/// The person asked through polkit (`[prompt] polkit = true`): polkitd has the authentication
/// agent of the caller's session (the desktop's dialog, or pkttyagent in a terminal) ask for
/// the caller's own login password (auth_self, never kept), which a process of the same user
/// does not know, so a yes is a person's. Opens its own connection to the system bus for each
/// ask (sd-bus is not thread-safe; asks are rare) and never holds a lock of keychaind's.
struct PolkitPrompt: Sendable {
    /// How long the person has to answer: then the check is cancelled (its dialog withdrawn).
    let timeoutSeconds: Int
    /// A D-Bus address to use instead of the system bus (tests).
    var busAddress: String? = nil

    /// nil when `[prompt]` leaves polkit off.
    init?(_ settings: PromptSettings) {
        guard settings.polkit else { return nil }
        timeoutSeconds = settings.polkitTimeout
    }

    init(timeoutSeconds: Int, busAddress: String?) {
        self.timeoutSeconds = timeoutSeconds
        self.busAddress = busAddress
    }

    private static let destination = "org.freedesktop.PolicyKit1"
    private static let path = "/org/freedesktop/PolicyKit1/Authority"
    private static let interface = "org.freedesktop.PolicyKit1.Authority"
    /// Probes answer at once (nobody is asked).
    private static let probeMicroseconds: UInt64 = 10_000_000

    func ask(_ request: PromptRequest, subject: PolkitSubject) -> PolkitOutcome {
        let bus: BusConnection
        do throws(KeychainError) {
            if let busAddress { bus = try BusConnection(address: busAddress) } else { bus = try BusConnection(.system) }
        } catch {
            return .unavailable("cannot reach the system bus: \(error.message)")
        }
        do throws(KeychainError) {
            let probe = PolkitCheck(request, subject: subject, interactive: false)
            switch try check(probe, on: bus, timeoutMicroseconds: Self.probeMicroseconds) {
            case .answered(let result):
                if let outcome = PolkitOutcome.ofProbe(result) { return outcome }
            case .failed(let outcome): return outcome
            case .timedOut: return .unavailable("polkitd did not answer in time")
            }
            let cancellationID = "keychaind-\(getpid())-\(subject.pid)-\(subject.startTime)"
            let asking = PolkitCheck(request, subject: subject, interactive: true, cancellationID: cancellationID)
            switch try check(asking, on: bus, timeoutMicroseconds: UInt64(timeoutSeconds) * 1_000_000) {
            case .answered(let result): return PolkitOutcome.ofCheck(result)
            case .failed(let outcome): return outcome
            case .timedOut:
                // Withdraws the agent's dialog: a password typed later must not count.
                _ = try? bus.answer(destination: Self.destination, path: Self.path, interface: Self.interface,
                                    member: "CancelCheckAuthorization", arguments: [.string(cancellationID)],
                                    timeoutMicroseconds: Self.probeMicroseconds)
                return .refused(KeychainError(.userCanceled, "nobody answered polkit's prompt within \(timeoutSeconds) s"))
            }
        } catch {
            return .unavailable("polkit's answer cannot be read: \(error.message)")
        }
    }

    private enum Reply {
        case answered(PolkitResult)
        case failed(PolkitOutcome)
        case timedOut
    }

    private func check(_ check: PolkitCheck, on bus: BusConnection, timeoutMicroseconds: UInt64) throws(KeychainError) -> Reply {
        switch try bus.answer(destination: Self.destination, path: Self.path, interface: Self.interface,
                              member: "CheckAuthorization", arguments: check.arguments, timeoutMicroseconds: timeoutMicroseconds) {
        case .reply(let message): return .answered(try PolkitResult(message.readValue()))
        case .error(let name, let text): return .failed(PolkitOutcome.ofError(name: name, message: text))
        case .timedOut: return .timedOut
        }
    }
}
