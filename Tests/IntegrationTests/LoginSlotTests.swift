import Foundation
import KeychainClient
import KeychainModel
import Testing

/// The login slot through the real daemon (issue 26; docs/security.md, "The login slot"):
/// the login password unlocks what the passcode unlocks, with a counter of its own.
@Suite("The login slot", .serialized)
struct LoginSlotTests {
    let passcode = bytes("1234")
    let login = bytes("correct horse")
    let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("login-slot"), "acct": .string("a"),
                                     "pdmn": .string("ak")]

    /// A keychain with a passcode, a when-unlocked item and a login slot, restarted: locked.
    func lockedKeychainWithSlot(config: String = "") throws -> (RunningDaemon, KeychainConnection) {
        let d = try RunningDaemon(config: config)
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item.merging(["v_Data": .data(bytes("secret"))]) { $1 })
        try c.setPasscode(passcode)
        try c.addLoginSlot(password: login)
        try d.restart()
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
        return (d, c)
    }

    func readable(_ c: KeychainConnection) -> Bool {
        (try? c.copyMatching(item.merging(["r_Data": .bool(true)]) { $1 })) == .single(.data(bytes("secret")))
    }

    @Test func theLoginPasswordUnlocksTheKeychain() throws {
        let (d, c) = try lockedKeychainWithSlot()
        defer { withExtendedLifetime(d) {} }
        try c.loginUnlock(password: login)
        #expect(try c.status()["state"] == .string("unlocked"))
        #expect(readable(c))
        #expect(try c.status()["login_slot"] == .string("current"))
    }

    @Test func aWrongLoginPasswordLeavesItLockedAndThePasscodeCounterUnchanged() throws {
        let (d, c) = try lockedKeychainWithSlot()
        expectStatus(.authFailed) { try c.loginUnlock(password: bytes("wrong")) }
        let status = try c.status()
        #expect(status["state"] == .string("lockedSinceBoot"))
        #expect(status["failed_attempts"] == .int(0))
        #expect(try c.loginSlotStatus()["failed_attempts"] == .int(1))
        #expect(!readable(c))
        #expect(!d.log.contains("wrong passcode"))
    }

    /// The slot's schedule is the passcode's: five wrong, then a minute during which not even
    /// the right login password is tried; the passcode is not delayed by any of it.
    @Test func guessingThroughTheSlotIsNoFasterThanThePasscode() throws {
        let (d, c) = try lockedKeychainWithSlot()
        defer { withExtendedLifetime(d) {} }
        for _ in 0..<5 { expectStatus(.authFailed) { try c.loginUnlock(password: bytes("guess")) } }
        do {
            try c.loginUnlock(password: login)
            Issue.record("the right login password was tried during the delay")
        } catch {
            #expect(error.status == .authFailed)
            #expect(error.message.contains("too many wrong login passwords"), "\(error.message)")
        }
        let status = try c.status()
        guard case .int(let wait)? = status["login_slot_retry_after"] else { Issue.record("no login_slot_retry_after"); return }
        #expect(wait >= 55 && wait <= 60)
        #expect(status["retry_after"] == .int(0))
        try c.unlock(passcode: passcode)  // the user's own unlock goes through at once
        #expect(readable(c))
    }

    @Test func aRewrapFollowsTheNewLoginPasswordAndUnlocksNothing() throws {
        let (d, c) = try lockedKeychainWithSlot()
        let new = bytes("battery staple")
        try c.rewrapLoginSlot(old: login, new: new)
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
        try d.restart()
        expectStatus(.authFailed) { try c.loginUnlock(password: self.login) }
        try c.loginUnlock(password: new)
        #expect(readable(c))
    }

    @Test func aRewrapWithAWrongOldPasswordMarksTheSlotStale() throws {
        let (d, c) = try lockedKeychainWithSlot()
        defer { withExtendedLifetime(d) {} }
        expectStatus(.authFailed) { try c.rewrapLoginSlot(old: bytes("not it"), new: bytes("new")) }
        #expect(try c.loginSlotStatus()["login_slot"] == .string("stale"))
        expectStatus(.notAvailable) { try c.loginUnlock(password: self.login) }
    }

    /// Root's `passwd alice` knows no old password: the slot goes stale, a login with it is
    /// told so without counting a failure, and the next passcode unlock on a terminal offers
    /// to rebuild it.
    @Test func aResetMakesTheSlotStaleAndTheNextPasscodeUnlockRebuildsIt() throws {
        let (d, c) = try lockedKeychainWithSlot()
        try c.rewrapLoginSlot(old: [], new: bytes("reset by root"))
        #expect(try c.status()["login_slot"] == .string("stale"))
        expectStatus(.notAvailable) { try c.loginUnlock(password: bytes("reset by root")) }
        #expect(try c.loginSlotStatus()["failed_attempts"] == .int(0))
        let r = try onTerminal(d, "unlock", typing: ["1234", "reset by root"])
        #expect(r.status == Exit.success, "\(r.text)")
        #expect(r.text.contains("login slot is stale"), "\(r.text)")
        #expect(r.text.contains("login slot rebuilt"), "\(r.text)")
        #expect(try c.status()["login_slot"] == .string("current"))
        try d.restart()
        try c.loginUnlock(password: bytes("reset by root"))
        #expect(readable(c))
    }

    @Test func removingThePasscodeRemovesTheSlot() throws {
        let (d, c) = try lockedKeychainWithSlot()
        defer { withExtendedLifetime(d) {} }
        try c.removePasscode(current: passcode)
        #expect(try c.status()["login_slot"] == nil)  // no passcode, no slot to speak of
        #expect(try c.loginSlotStatus()["login_slot"] == .string("none"))
    }

    @Test func aSlotNeedsAPasscodeAndAnUnlockedKeychain() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.param) { try c.addLoginSlot(password: self.login) }
        try c.setPasscode(passcode)
        try c.lock()
        expectStatus(.interactionNotAllowed) { try c.addLoginSlot(password: self.login) }
        expectStatus(.itemNotFound) { try c.loginUnlock(password: self.login) }
    }

    @Test func theCLIAddsShowsAndRemovesTheSlot() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        #expect(try d.cli(["passcode", "login-slot", "add"], input: bytes("correct horse\n")).status == Exit.success)
        #expect(try d.cli(["passcode", "login-slot", "status"]).text.contains("login_slot: current"))
        try c.lock()
        #expect(try d.cli(["unlock", "--login"], input: bytes("wrong\n")).status == Exit.authFailed)
        #expect(try d.cli(["unlock", "--login"], input: bytes("correct horse\n")).status == Exit.success)
        #expect(try c.status()["state"] == .string("unlocked"))
        #expect(try d.cli(["passcode", "login-slot", "remove"]).status == Exit.success)
        #expect(try d.cli(["passcode", "login-slot", "status", "--json"]).text.contains("\"login_slot\":\"none\""))
    }

    /// Another uid, even one with access groups of its own here, can neither read the slot's
    /// state nor unlock, rewrap, add or remove it.
    @Test func anotherUidCannotUseTheLoginSlotCalls() throws {
        let stranger = try MultiUserTests.user("kcapp-c")
        let (d, c) = try lockedKeychainWithSlot(config: """
            socket_mode = "0666"
            [[app]]
            id = "owner"
            uids = [0]
            groups = ["owner"]
            [[app]]
            id = "stranger"
            uids = [\(stranger)]
            groups = ["stranger"]
            """)
        for (args, input) in [(["unlock", "--login"], "correct horse\n"), (["passcode", "login-slot", "status"], ""),
                              (["passcode", "login-slot", "add"], "x\n"), (["passcode", "login-slot", "remove"], "")] {
            let r = try d.cli(args, input: bytes(input), asUser: stranger)
            #expect(r.status == Exit.denied, "\(args): \(r.stderr)")
        }
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
        #expect(try c.loginSlotStatus()["login_slot"] == .string("current"))
    }
}
