import DBus
import KeychainModel
import Testing
@testable import KeychainServer

/// What keychaind asks polkit (CheckAuthorization's arguments) and what each of polkit's
/// answers means, without a bus (PolkitPresenceTests runs them against the real daemon and a
/// stand-in for polkitd).
@Suite("The polkit check")
struct PolkitCheckTests {
    static let subject = PolkitSubject(pid: 4242, startTime: 987_654, uid: 1000)
    static let request = PromptRequest(executable: "/usr/bin/curl", pid: 4242,
                                       label: "prod\ntoken", reason: "deploy\u{202E}evil")

    @Test func theSubjectIsTheCallingProcessWithItsStartTime() {
        #expect(Self.subject.busValue == .structure([.string("unix-process"), .array(element: "{sv}", [
            .entry(.string("pid"), .variant(.uint32(4242))),
            .entry(.string("start-time"), .variant(.uint64(987_654))),
            .entry(.string("uid"), .variant(.int32(1000))),
        ])]))
    }

    @Test func theCheckThatAsksAllowsInteractionAndCanBeCancelled() {
        let check = PolkitCheck(Self.request, subject: Self.subject, interactive: true, cancellationID: "c1")
        #expect(check.arguments.count == 5)
        #expect(check.arguments[1] == .string("org.keychaind.confirm-item-use"))
        #expect(check.arguments[3] == .uint32(1))
        #expect(check.arguments[4] == .string("c1"))
        #expect(check.arguments.map(\.signature).joined() == "(sa{sv})sa{ss}us")
    }

    @Test func theProbeAsksNobody() {
        let check = PolkitCheck(Self.request, subject: Self.subject, interactive: false, cancellationID: "c1")
        #expect(check.arguments[3] == .uint32(0))
        #expect(check.arguments[4] == .string(""))
    }

    @Test func theDetailsShowTheCallersTextEscaped() {
        let details = PolkitCheck.details(for: Self.request)
        #expect(details["program"] == "/usr/bin/curl")
        #expect(details["pid"] == "4242")
        #expect(details["item"] == "prod\\u{a}token")
        #expect(details["reason"] == "deploy\\u{202e}evil")
        #expect(details["request"] == "/usr/bin/curl (pid 4242) wants to use the keychain item \u{201C}prod\\u{a}token\u{201D}.\nIts reason: deploy\\u{202e}evil")
    }

    @Test func theDetailsOfAProgramWhoseExecutableCannotBeReadNameItsUIDUnitAndCommand() {
        var request = PromptRequest(executable: nil, pid: 4242, label: "prod", reason: nil)
        request.hidden = HiddenProgram(uid: 1001, userName: "alice", unit: .system("session-3.scope"), command: "py\nthon")
        let details = PolkitCheck.details(for: request)
        #expect(details["program"] == "")
        #expect(details["uid"] == "1001")
        #expect(details["user"] == "alice")
        #expect(details["unit"] == "session-3.scope")
        #expect(details["command"] == "py\\u{a}thon")
        #expect(details["request"] == "A program whose executable cannot be read (pid 4242, uid 1001 (alice), unit session-3.scope, calls itself `py\\u{a}thon`) wants to use the keychain item \u{201C}prod\u{201D}.")
    }

    @Test func aReadableExecutableIsNamedAloneByItsPath() {
        let details = PolkitCheck.details(for: Self.request)
        #expect(details["uid"] == nil && details["unit"] == nil && details["command"] == nil)
    }

    @Test func aLongLabelIsCutSoTheProgramStaysInView() {
        let request = PromptRequest(executable: "/usr/bin/curl", pid: 1, label: String(repeating: "x", count: 5000), reason: nil)
        #expect(PolkitCheck.details(for: request)["item"]?.count == PromptRequest.shownLimit + 1)
    }

    @Test func anAnswerOtherThanPolkitsShapeIsDecode() throws {
        #expect(throws: KeychainError.self) { try PolkitResult(.structure([.bool(true)])) }
        #expect(try PolkitResult(.structure([.bool(false), .bool(false), .stringDictionary(["polkit.dismissed": "true"])])).dismissed)
    }

    @Test func aChallengeAtTheProbeGoesOnToAsk() {
        #expect(PolkitOutcome.ofProbe(PolkitResult(authorized: false, challenge: true)) == nil)
    }

    @Test func aYesAtTheProbeIsNobodysPresence() {
        guard case .unavailable? = PolkitOutcome.ofProbe(PolkitResult(authorized: true, challenge: false)) else {
            Issue.record("a yes without asking counted"); return
        }
    }

    @Test func aNoAtTheProbeLeavesItToAnotherPrompt() {
        guard case .unavailable? = PolkitOutcome.ofProbe(PolkitResult(authorized: false, challenge: false)) else {
            Issue.record("not unavailable"); return
        }
    }

    @Test func authorizedIsAllowed() {
        #expect(PolkitOutcome.ofCheck(PolkitResult(authorized: true, challenge: false)) == .allowed)
    }

    @Test func dismissedAndWrongPasswordsAreUserCanceled() {
        for result in [PolkitResult(authorized: false, challenge: false, details: ["polkit.dismissed": "true"]),
                       PolkitResult(authorized: false, challenge: false)] {
            guard case .refused(let error) = PolkitOutcome.ofCheck(result) else { Issue.record("\(result) is not refused"); continue }
            #expect(error.status == .userCanceled)
        }
    }

    @Test func aChallengeAfterAskingMeansNoAgent() {
        guard case .unavailable(let why) = PolkitOutcome.ofCheck(PolkitResult(authorized: false, challenge: true)) else {
            Issue.record("not unavailable"); return
        }
        #expect(why.contains("no polkit authentication agent"))
    }

    @Test func noPolkitdAndAnUntrustedCallerLeaveItToAnotherPrompt() {
        for name in ["org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
                     "org.freedesktop.PolicyKit1.Error.NotAuthorized", "org.freedesktop.PolicyKit1.Error.Failed"] {
            guard case .unavailable = PolkitOutcome.ofError(name: name, message: "m") else { Issue.record("\(name) is not unavailable"); continue }
        }
        guard case .refused(let error) = PolkitOutcome.ofError(name: "org.freedesktop.PolicyKit1.Error.Cancelled", message: "") else {
            Issue.record("cancelled"); return
        }
        #expect(error.status == .userCanceled)
    }

    @Test func polkitIsOffUnlessTheConfigTurnsItOn() throws {
        #expect(PolkitPrompt(PromptSettings()) == nil)
        let config = try DaemonConfig.parse("[prompt]\npolkit = true\npolkit_timeout_seconds = 30")
        #expect(config.prompt.polkit && config.prompt.polkitTimeout == 30)
        #expect(PolkitPrompt(config.prompt)?.timeoutSeconds == 30)
    }

    @Test func thePolkitTimeoutIsBounded() {
        for bad in ["polkit_timeout_seconds = 4", "polkit_timeout_seconds = 601", "polkit = \"yes\""] {
            #expect(throws: DaemonConfig.ParseError.self) { try DaemonConfig.parse("[prompt]\n" + bad) }
        }
    }
}
