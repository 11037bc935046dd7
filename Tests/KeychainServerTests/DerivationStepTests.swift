import KeychainCrypto
import KeychainModel
import KeychainProtocol
import Testing
@testable import KeychainServer
@testable import KeychainStore

/// A call that derives a key runs in steps: `begin` under the store's lock, Argon2id without
/// it, `finish` under it again. Other calls land between the steps; whatever lands there, the
/// keychain ends as if the call had run whole at its `finish`, or (a passcode call whose
/// keybag another one replaced meanwhile) refused, changing and counting nothing.
@Suite("Calls that derive a key, step by step")
struct DerivationStepTests {
    typealias Harness = LockInvariantTests.Harness
    let first = LockInvariantTests.passcodes[0]
    let second = LockInvariantTests.passcodes[1]

    /// A keychain with a passcode, an ak and a ck item, restarted: locked since boot.
    func lockedSinceBoot() throws -> Harness {
        let h = try Harness()
        for (account, pdmn) in [("ak", Protection.whenUnlocked), ("ck", .afterFirstUnlock)] {
            #expect(h.call(.add(["class": .string("genp"), "acct": .string(account), "pdmn": .string(pdmn.rawValue),
                                 "v_Data": .data([1])])) == 0)
        }
        #expect(h.call(.setPasscode(new: first)) == 0)
        try h.open()
        return h
    }

    func begin(_ h: Harness, _ request: Request) throws -> Derivation {
        guard case .derive(let derivation) = h.handler.begin(request, from: h.caller, policy: h.policy) else {
            throw KeychainError(.internal, "\(request.operation) did not go on to derive a key")
        }
        return derivation
    }

    func finish(_ h: Harness, _ derivation: Derivation) -> Response {
        h.handler.finish(derivation, Result { () throws(KeychainError) in try derivation.run() }, from: h.caller)
    }

    func status(_ h: Harness) throws -> AttributeDictionary {
        guard case .single(.attributes(let info)) = h.handler.handle(.status, from: h.caller, policy: h.policy).result else {
            throw KeychainError(.decode, "no status")
        }
        return info
    }

    @Test func anUnlockWhosePasscodeChangedDuringItsDerivationIsRefusedAndNotCounted() throws {
        let h = try lockedSinceBoot()
        let unlock = try begin(h, .unlock(passcode: first))
        #expect(h.call(.changePasscode(old: first, new: second)) == 0)
        let response = finish(h, unlock)
        #expect(response.status == KeychainStatus.notAvailable.rawValue)
        #expect(try status(h)["state"] == .string("lockedSinceBoot"))
        #expect(try status(h)["failed_attempts"] == .int(0))
        #expect(!h.handler.store.isAvailable(.afterFirstUnlock))
    }

    @Test func aWrongPasscodeCheckedAgainstAReplacedKeybagIsNotCounted() throws {
        let h = try lockedSinceBoot()
        let guess = try begin(h, .unlock(passcode: second))
        #expect(h.call(.changePasscode(old: first, new: second)) == 0)
        #expect(finish(h, guess).status == KeychainStatus.notAvailable.rawValue)
        #expect(try status(h)["failed_attempts"] == .int(0))
    }

    @Test func twoWrongPasscodesBegunTogetherBothCount() throws {
        let h = try lockedSinceBoot()
        let one = try begin(h, .unlock(passcode: second))
        let two = try begin(h, .unlock(passcode: second))
        #expect(finish(h, one).status == KeychainStatus.authFailed.rawValue)
        #expect(finish(h, two).status == KeychainStatus.authFailed.rawValue)
        #expect(try status(h)["failed_attempts"] == .int(2))
    }

    @Test func duringAWrongPasscodeDelayNoDerivationBegins() throws {
        let h = try lockedSinceBoot()
        for _ in 1...5 { #expect(h.call(.unlock(passcode: second)) == KeychainStatus.authFailed.rawValue) }
        for request in [Request.unlock(passcode: first), .changePasscode(old: first, new: second), .removePasscode(current: first)] {
            guard case .answered(let response) = h.handler.begin(request, from: h.caller, policy: h.policy) else {
                Issue.record("\(request.operation) began a derivation during the delay")
                continue
            }
            #expect(response.status == KeychainStatus.authFailed.rawValue)
            #expect(response.message.contains("try again in"))
        }
    }

    @Test func aLockDuringAnUnlocksDerivationComesBeforeIt() throws {
        let h = try lockedSinceBoot()
        #expect(h.call(.unlock(passcode: first)) == 0)
        let unlock = try begin(h, .unlock(passcode: first))
        #expect(h.call(.lock) == 0)
        h.advance(to: h.time.now + LockModel.grace + 1)
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(finish(h, unlock).status == 0)
        #expect(try status(h)["state"] == .string("unlocked"))
        #expect(h.handler.store.isAvailable(.whenUnlocked))
    }

    @Test func aPasscodeChangeFinishedAfterALockLoadsNothing() throws {
        let h = try lockedSinceBoot()
        #expect(h.call(.unlock(passcode: first)) == 0)
        let change = try begin(h, .changePasscode(old: first, new: second))
        #expect(h.call(.lock) == 0)
        h.advance(to: h.time.now + LockModel.grace + 1)
        #expect(finish(h, change).status == 0)
        #expect(try status(h)["state"] == .string("locked"))
        #expect(!h.handler.store.isAvailable(.whenUnlocked))
        #expect(h.call(.unlock(passcode: second)) == 0)
    }

    @Test func aPasscodeRemovalFinishedAfterALockLeavesTheKeychainUnlockedForGood() throws {
        let h = try lockedSinceBoot()
        #expect(h.call(.unlock(passcode: first)) == 0)
        let removal = try begin(h, .removePasscode(current: first))
        #expect(h.call(.lock) == 0)
        h.advance(to: h.time.now + LockModel.grace + 1)
        #expect(finish(h, removal).status == 0)
        #expect(try status(h)["state"] == .string("unlocked"))
        #expect(try status(h)["passcode"] == .bool(false))
        for pdmn in Protection.allCases where pdmn != .whenPasscodeSetThisDeviceOnly {
            #expect(h.handler.store.isAvailable(pdmn), "\(pdmn.rawValue)")
        }
    }

    @Test func aBackupExportsWhenItBeginsSoALockDuringItsSealingChangesNothing() throws {
        let h = try lockedSinceBoot()
        #expect(h.call(.unlock(passcode: first)) == 0)
        let backup = try begin(h, .backupBegin(password: SecretBytes(Array("backup-pw".utf8))))
        #expect(h.call(.lock) == 0)
        h.advance(to: h.time.now + LockModel.grace + 1)
        let response = finish(h, backup)
        #expect(response.status == 0)
        guard case .single(.attributes(let info)) = response.result else {
            Issue.record("no backup summary")
            return
        }
        #expect(info["items"] == .int(2))
        #expect(try status(h)["state"] == .string("locked"))
    }
}
