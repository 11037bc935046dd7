import Testing
import KeychainCrypto
import KeychainModel

private let passcode = Array("1234".utf8)
private let login = Array("login password".utf8)
private let fast = Argon2Parameters.testingOnly

/// The login slot (docs/security.md, "The login slot"): the same class keys as the passcode's,
/// under the login password.
@Suite struct LoginSlotTests {
    let deviceKey = SecureKey.random()

    private func lockedWithSlot(passcodeCost: Argon2Parameters = fast, slotCost: Argon2Parameters = fast) throws -> (Keybag, LoginSlot) {
        var bag = try Keybag.create(deviceKey: deviceKey)
        try bag.setPasscode(passcode, parameters: passcodeCost, deviceKey: deviceKey)
        let slot = try bag.sealingLoginSlot(login, parameters: slotCost, deviceKey: deviceKey)
        let locked = try Keybag(deviceKey: deviceKey, record: KeybagRecord(decoding: bag.record.encoded()))
        return (locked, try LoginSlot(decoding: slot.encoded()))
    }

    @Test func theLoginPasswordLoadsTheSameKeysAsThePasscode() throws {
        let (locked, slot) = try lockedWithSlot()
        var bag = locked, byPasscode = locked
        try bag.apply(bag.unlocking(through: slot, password: login, deviceKey: deviceKey))
        try byPasscode.unlock(passcode: passcode, deviceKey: deviceKey)
        for pdmn in Protection.allCases {
            let a = bag.key(for: pdmn), b = byPasscode.key(for: pdmn)
            #expect(a != nil, "\(pdmn)")
            let blob = ItemSealer.seal([7], identity: [1], classKey: a!)
            #expect((try? ItemSealer.open(blob, identity: [1], classKey: b!)) == [7], "\(pdmn)")
        }
    }

    @Test func aWrongLoginPasswordIsAuthFailedAndLoadsNothing() throws {
        let (bag, slot) = try lockedWithSlot()
        #expect(throws: KeychainError(.authFailed, "")) { try bag.unlocking(through: slot, password: Array("guess".utf8), deviceKey: self.deviceKey) }
    }

    @Test func thePasscodeDoesNotOpenTheSlotNorTheLoginPasswordThePasscode() throws {
        let (locked, slot) = try lockedWithSlot()
        var bag = locked
        #expect(throws: KeychainError(.authFailed, "")) { try bag.unlocking(through: slot, password: passcode, deviceKey: self.deviceKey) }
        #expect(throws: KeychainError(.authFailed, "")) { try bag.unlock(passcode: login, deviceKey: self.deviceKey) }
    }

    @Test func theSlotCostsAtLeastWhatThePasscodeCosts() throws {
        let dearer = Argon2Parameters(opsLimit: fast.opsLimit + 1, memLimitBytes: fast.memLimitBytes * 2)
        let (_, slot) = try lockedWithSlot(passcodeCost: dearer, slotCost: fast)
        guard case .current(let sealed) = slot else { Issue.record("no sealed slot"); return }
        #expect(sealed.argon2.opsLimit >= dearer.opsLimit)
        #expect(sealed.argon2.memLimitBytes >= dearer.memLimitBytes)
    }

    @Test func aRewrapFollowsTheNewPasswordAndTheOldOneOpensNothing() throws {
        let (locked, slot) = try lockedWithSlot()
        var bag = locked
        let new = Array("new login".utf8)
        let rewrapped = try bag.rewrappingLoginSlot(slot, old: login, new: new, parameters: fast, deviceKey: deviceKey)
        #expect(bag.loaded[.whenUnlocked] == nil)  // a rewrap loads nothing
        #expect(throws: KeychainError(.authFailed, "")) { try bag.unlocking(through: rewrapped, password: login, deviceKey: self.deviceKey) }
        try bag.apply(bag.unlocking(through: rewrapped, password: new, deviceKey: deviceKey))
        #expect(bag.loaded[.whenUnlocked] != nil)
    }

    @Test func aStaleSlotOpensWithNoPassword() throws {
        let (bag, _) = try lockedWithSlot()
        let stale = try LoginSlot(decoding: LoginSlot.stale.encoded())
        #expect(stale == .stale)
        #expect(throws: KeychainError(.notAvailable, "")) { try bag.unlocking(through: stale, password: login, deviceKey: self.deviceKey) }
    }

    @Test func noSlotWithoutAPasscodeNorWhileLocked() throws {
        let plain = try Keybag.create(deviceKey: deviceKey)
        #expect(throws: KeychainError(.param, "")) { try plain.sealingLoginSlot(login, parameters: fast, deviceKey: self.deviceKey) }
        let (locked, _) = try lockedWithSlot()
        #expect(throws: KeychainError(.interactionNotAllowed, "")) { try locked.sealingLoginSlot(login, parameters: fast, deviceKey: self.deviceKey) }
    }

    @Test func anAlteredSlotIsRefused() throws {
        let (_, slot) = try lockedWithSlot()
        var bytes = slot.encoded()
        bytes.append(0)
        #expect(throws: KeychainError(.decode, "")) { try LoginSlot(decoding: bytes) }
        bytes = slot.encoded()
        bytes[0] = 2
        #expect(throws: KeychainError(.notAvailable, "")) { try LoginSlot(decoding: bytes) }
    }
}
