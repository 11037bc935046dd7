import Testing
import KeychainCrypto
import KeychainModel

private let passcode = Array("1234".utf8)
private let otherPasscode = Array("5678".utf8)
private let fast = Argon2Parameters.testingOnly

/// True when `a` and `b` are the same class key: what one seals the other opens.
private func sameKey(_ a: SecureKey?, _ b: SecureKey?) -> Bool {
    guard let a, let b else { return false }
    let blob = ItemSealer.seal([1, 2, 3], identity: [9], classKey: a)
    return (try? ItemSealer.open(blob, identity: [9], classKey: b)) == [1, 2, 3]
}

/// The keybag as the daemon would find it after a restart: from the persisted bytes.
private func reopen(_ bag: Keybag, deviceKey: SecureKey) throws -> Keybag {
    try Keybag(deviceKey: deviceKey, record: KeybagRecord(decoding: bag.record.encoded()))
}

private let allButAkpu = Set(Protection.allCases).subtracting([.whenPasscodeSetThisDeviceOnly])

@Suite struct KeybagTests {
    let deviceKey = SecureKey.random()

    private func withPasscode() throws -> Keybag {
        var bag = try Keybag.create(deviceKey: deviceKey)
        try bag.setPasscode(passcode, parameters: fast, deviceKey: deviceKey)
        return bag
    }

    @Test func createLoadsEveryClassButAkpu() throws {
        let bag = try Keybag.create(deviceKey: deviceKey)
        #expect(Set(bag.loaded.keys) == allButAkpu)
        #expect(bag.key(for: .whenPasscodeSetThisDeviceOnly) == nil)
        #expect(!bag.record.hasPasscode)
        #expect(Set(bag.record.wrappedKeys.keys) == allButAkpu)
    }

    @Test func createGivesEachClassItsOwnKey() throws {
        let bag = try Keybag.create(deviceKey: deviceKey)
        let keys = bag.loaded.values.map { bytes(of: $0) }
        #expect(Set(keys).count == keys.count)
    }

    @Test func reopenedKeybagWithoutPasscodeLoadsTheSameKeys() throws {
        let bag = try Keybag.create(deviceKey: deviceKey)
        let again = try reopen(bag, deviceKey: deviceKey)
        #expect(Set(again.loaded.keys) == allButAkpu)
        for pdmn in allButAkpu {
            #expect(sameKey(bag.key(for: pdmn), again.key(for: pdmn)), "\(pdmn.rawValue)")
        }
    }

    @Test func keybagDoesNotOpenUnderAnotherDeviceKey() throws {
        let bag = try Keybag.create(deviceKey: deviceKey)
        #expect(thrownStatus { () throws(KeychainError) in
            try Keybag(deviceKey: SecureKey.random(), record: bag.record)
        } == .decode)
    }

    @Test func setPasscodeAddsAnAkpuKeyAndKeepsEverythingLoaded() throws {
        let before = try Keybag.create(deviceKey: deviceKey)
        var bag = before
        try bag.setPasscode(passcode, parameters: fast, deviceKey: deviceKey)
        #expect(bag.record.hasPasscode)
        #expect(Set(bag.loaded.keys) == Set(Protection.allCases))
        #expect(Set(bag.record.wrappedKeys.keys) == Set(Protection.allCases))
        for pdmn in allButAkpu {
            #expect(sameKey(before.key(for: pdmn), bag.key(for: pdmn)), "\(pdmn.rawValue) must not change")
        }
    }

    @Test func setPasscodeWhenOneIsSetIsParam() throws {
        var bag = try withPasscode()
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.setPasscode(otherPasscode, parameters: fast, deviceKey: deviceKey)
        } == .param)
    }

    @Test func setPasscodeWhileLockedIsInteractionNotAllowed() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        bag.purgeWhenUnlockedKeys()
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.setPasscode(passcode, parameters: fast, deviceKey: deviceKey)
        } == .interactionNotAllowed)
        #expect(!bag.record.hasPasscode)
    }

    @Test func emptyPasscodeCannotBeSet() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.setPasscode([], parameters: fast, deviceKey: deviceKey)
        } == .param)
        #expect(!bag.record.hasPasscode)
    }

    @Test func reopenedKeybagWithPasscodeLoadsOnlyTheAlwaysKeys() throws {
        let bag = try withPasscode()
        let again = try reopen(bag, deviceKey: deviceKey)
        #expect(Set(again.loaded.keys) == [.always, .alwaysThisDeviceOnly])
        #expect(sameKey(bag.key(for: .always), again.key(for: .always)))
        #expect(sameKey(bag.key(for: .alwaysThisDeviceOnly), again.key(for: .alwaysThisDeviceOnly)))
    }

    @Test func unlockWithTheWrongPasscodeIsAuthFailedAndLoadsNothing() throws {
        var again = try reopen(try withPasscode(), deviceKey: deviceKey)
        #expect(thrownStatus { () throws(KeychainError) in
            try again.unlock(passcode: otherPasscode, deviceKey: deviceKey)
        } == .authFailed)
        #expect(Set(again.loaded.keys) == [.always, .alwaysThisDeviceOnly])
    }

    @Test func unlockUnderAnotherDeviceKeyIsAuthFailed() throws {
        let bag = try withPasscode()
        let otherDevice = SecureKey.random()
        // The Always keys are not wrapped under the passcode, so open the record with them
        // stripped to reach unlock: the passcode alone must not be enough.
        var record = try KeybagRecord(decoding: bag.record.encoded())
        record.wrappedKeys[.always] = nil
        record.wrappedKeys[.alwaysThisDeviceOnly] = nil
        var stolen = try Keybag(deviceKey: otherDevice, record: record)
        #expect(thrownStatus { () throws(KeychainError) in
            try stolen.unlock(passcode: passcode, deviceKey: otherDevice)
        } == .authFailed)
        #expect(stolen.loaded.isEmpty)
    }

    @Test func unlockWithTheRightPasscodeLoadsEveryClassIncludingAkpu() throws {
        let bag = try withPasscode()
        var again = try reopen(bag, deviceKey: deviceKey)
        try again.unlock(passcode: passcode, deviceKey: deviceKey)
        #expect(Set(again.loaded.keys) == Set(Protection.allCases))
        for pdmn in Protection.allCases {
            #expect(sameKey(bag.key(for: pdmn), again.key(for: pdmn)), "\(pdmn.rawValue)")
        }
    }

    @Test func unlockWithoutAPasscodeSetIsANoOp() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        try bag.unlock(passcode: Array("anything".utf8), deviceKey: deviceKey)
        #expect(Set(bag.loaded.keys) == allButAkpu)
    }

    @Test func changePasscodeReplacesTheOldOneAndKeepsTheClassKeys() throws {
        var bag = try withPasscode()
        let before = bag
        try bag.changePasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)

        var withOld = try reopen(bag, deviceKey: deviceKey)
        #expect(thrownStatus { () throws(KeychainError) in
            try withOld.unlock(passcode: passcode, deviceKey: deviceKey)
        } == .authFailed)

        var withNew = try reopen(bag, deviceKey: deviceKey)
        try withNew.unlock(passcode: otherPasscode, deviceKey: deviceKey)
        #expect(Set(withNew.loaded.keys) == Set(Protection.allCases))
        for pdmn in Protection.allCases {
            #expect(sameKey(before.key(for: pdmn), withNew.key(for: pdmn)), "\(pdmn.rawValue) must survive the change")
        }
    }

    @Test func changePasscodeUsesAFreshSalt() throws {
        var bag = try withPasscode()
        let oldSalt = bag.record.passcode?.salt
        try bag.changePasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)
        #expect(bag.record.passcode?.salt != oldSalt)
        #expect(bag.record.passcode?.salt.count == Argon2Parameters.saltBytes)
    }

    @Test func changePasscodeWithTheWrongOldPasscodeIsAuthFailedAndChangesNothing() throws {
        var bag = try withPasscode()
        let record = bag.record
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.changePasscode(old: otherPasscode, new: Array("0000".utf8), parameters: fast, deviceKey: deviceKey)
        } == .authFailed)
        #expect(bag.record == record)
        var again = try reopen(bag, deviceKey: deviceKey)
        try again.unlock(passcode: passcode, deviceKey: deviceKey)
    }

    @Test func changePasscodeWorksWhileLocked() throws {
        var bag = try reopen(try withPasscode(), deviceKey: deviceKey)
        try bag.changePasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)
        var again = try reopen(bag, deviceKey: deviceKey)
        try again.unlock(passcode: otherPasscode, deviceKey: deviceKey)
        #expect(Set(again.loaded.keys) == Set(Protection.allCases))
    }

    @Test func changePasscodeWithoutOneSetIsParam() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.changePasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)
        } == .param)
    }

    @Test func removePasscodeDropsAkpuAndTheReopenedKeybagLoadsEverythingWithoutPasscode() throws {
        var bag = try withPasscode()
        let before = bag
        try bag.removePasscode(current: passcode, deviceKey: deviceKey)
        #expect(!bag.record.hasPasscode)
        #expect(bag.key(for: .whenPasscodeSetThisDeviceOnly) == nil)
        #expect(bag.record.wrappedKeys[.whenPasscodeSetThisDeviceOnly] == nil)

        let again = try reopen(bag, deviceKey: deviceKey)
        #expect(Set(again.loaded.keys) == allButAkpu)
        for pdmn in allButAkpu {
            #expect(sameKey(before.key(for: pdmn), again.key(for: pdmn)), "\(pdmn.rawValue)")
        }
    }

    @Test func removePasscodeWithTheWrongPasscodeIsAuthFailedAndChangesNothing() throws {
        var bag = try withPasscode()
        let record = bag.record
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.removePasscode(current: otherPasscode, deviceKey: deviceKey)
        } == .authFailed)
        #expect(bag.record == record)
        #expect(bag.key(for: .whenPasscodeSetThisDeviceOnly) != nil)
    }

    @Test func removePasscodeWithoutOneSetIsParam() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        #expect(thrownStatus { () throws(KeychainError) in
            try bag.removePasscode(current: passcode, deviceKey: deviceKey)
        } == .param)
    }

    @Test func passcodeSetAgainAfterRemovalGetsANewAkpuKey() throws {
        var bag = try withPasscode()
        let oldAkpu = bag.key(for: .whenPasscodeSetThisDeviceOnly)
        try bag.removePasscode(current: passcode, deviceKey: deviceKey)
        try bag.setPasscode(passcode, parameters: fast, deviceKey: deviceKey)
        #expect(bag.key(for: .whenPasscodeSetThisDeviceOnly) != nil)
        #expect(!sameKey(oldAkpu, bag.key(for: .whenPasscodeSetThisDeviceOnly)))
    }

    @Test func purgeDropsExactlyTheWhenUnlockedKeys() throws {
        var bag = try withPasscode()
        bag.purgeWhenUnlockedKeys()
        #expect(Set(bag.loaded.keys) == [.afterFirstUnlock, .always, .afterFirstUnlockThisDeviceOnly, .alwaysThisDeviceOnly])
    }

    @Test func purgeThenUnlockRestoresTheSameKeys() throws {
        var bag = try withPasscode()
        let before = bag
        bag.purgeWhenUnlockedKeys()
        try bag.unlock(passcode: passcode, deviceKey: deviceKey)
        for pdmn in Protection.allCases {
            #expect(sameKey(before.key(for: pdmn), bag.key(for: pdmn)), "\(pdmn.rawValue)")
        }
    }

    // Two steps: computed from a copy (Argon2id, no lock), applied to the live keybag.

    @Test func aChangeComputedBeforeAnotherWasAppliedIsRefusedAndChangesNothing() throws {
        var bag = try reopen(try withPasscode(), deviceKey: deviceKey)
        let unlock = try bag.unlocking(passcode: passcode, deviceKey: deviceKey)
        try bag.changePasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)
        let record = bag.record
        #expect(thrownStatus { () throws(KeychainError) in try bag.apply(unlock) } == .notAvailable)
        #expect(bag.record == record)
        #expect(Set(bag.loaded.keys) == [.always, .alwaysThisDeviceOnly])
    }

    @Test func computingAChangeLeavesTheKeybagItWasComputedFromAsItWas() throws {
        let bag = try reopen(try withPasscode(), deviceKey: deviceKey)
        _ = try bag.unlocking(passcode: passcode, deviceKey: deviceKey)
        _ = try bag.changingPasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)
        #expect(Set(bag.loaded.keys) == [.always, .alwaysThisDeviceOnly])
    }

    @Test func anUnlockAppliedAfterAPurgeLoadsEveryClass() throws {
        var bag = try withPasscode()
        let unlock = try bag.unlocking(passcode: passcode, deviceKey: deviceKey)
        bag.purgeWhenUnlockedKeys()
        try bag.apply(unlock)
        #expect(Set(bag.loaded.keys) == Set(Protection.allCases))
    }

    @Test func aPasscodeChangeAppliedAfterAPurgeLoadsNothing() throws {
        var bag = try withPasscode()
        let change = try bag.changingPasscode(old: passcode, new: otherPasscode, parameters: fast, deviceKey: deviceKey)
        bag.purgeWhenUnlockedKeys()
        try bag.apply(change)
        #expect(Set(bag.loaded.keys) == [.afterFirstUnlock, .always, .afterFirstUnlockThisDeviceOnly, .alwaysThisDeviceOnly])
        var again = try reopen(bag, deviceKey: deviceKey)
        try again.unlock(passcode: otherPasscode, deviceKey: deviceKey)
    }

    @Test func passcodeRecordStoresTheCostItWasMadeWith() throws {
        let bag = try withPasscode()
        #expect(bag.record.passcode?.argon2 == fast)
    }
}

@Suite struct KeybagRecordTests {
    let deviceKey = SecureKey.random()

    @Test func recordWithoutPasscodeRoundTrips() throws {
        let record = try Keybag.create(deviceKey: deviceKey).record
        #expect(try KeybagRecord(decoding: record.encoded()) == record)
    }

    @Test func recordWithPasscodeRoundTrips() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        try bag.setPasscode(passcode, parameters: fast, deviceKey: deviceKey)
        let decoded = try KeybagRecord(decoding: bag.record.encoded())
        #expect(decoded == bag.record)
        #expect(decoded.passcode?.argon2 == fast)
    }

    @Test func encodingIsCanonical() throws {
        let record = try Keybag.create(deviceKey: deviceKey).record
        let rebuilt = KeybagRecord(passcode: nil, wrappedKeys: Dictionary(uniqueKeysWithValues: record.wrappedKeys.reversed()))
        #expect(rebuilt.encoded() == record.encoded())
    }

    @Test func everyTruncationIsDecode() throws {
        var bag = try Keybag.create(deviceKey: deviceKey)
        try bag.setPasscode(passcode, parameters: fast, deviceKey: deviceKey)
        let full = bag.record.encoded()
        for length in 1..<full.count {
            let prefix = Array(full.prefix(length))
            #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: prefix) } == .decode,
                    "prefix of \(length) bytes")
        }
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: []) } != nil)
    }

    @Test func trailingBytesAreDecode() throws {
        let full = try Keybag.create(deviceKey: deviceKey).record.encoded()
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: full + [0]) } == .decode)
    }

    @Test func unsupportedVersionIsNotAvailable() throws {
        var full = try Keybag.create(deviceKey: deviceKey).record.encoded()
        #expect(full[0] == KeybagRecord.currentVersion)
        full[0] = 2
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: full) } == .notAvailable)
    }

    @Test func invalidPasscodeFlagIsDecode() throws {
        var full = try Keybag.create(deviceKey: deviceKey).record.encoded()
        full[1] = 2
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: full) } == .decode)
    }

    @Test func unknownKeyClassNumberIsDecode() {
        var w = ByteWriter()
        w.u8(1); w.u8(0); w.u8(1)
        w.u8(13)
        w.lengthPrefixed([UInt8](repeating: 0, count: 72))
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: w.bytes) } == .decode)
    }

    @Test func duplicateKeyClassEntryIsDecode() throws {
        let record = try Keybag.create(deviceKey: deviceKey).record
        var w = ByteWriter()
        w.u8(1); w.u8(0); w.u8(2)
        w.u8(Protection.always.keyClassNumber)
        w.lengthPrefixed(record.wrappedKeys[.always]!)
        w.u8(Protection.always.keyClassNumber)
        w.lengthPrefixed(record.wrappedKeys[.always]!)
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: w.bytes) } == .decode)
    }

    @Test func outOfRangeArgon2ParametersAreDecode() throws {
        var w = ByteWriter()
        w.u8(1); w.u8(1)
        w.lengthPrefixed([UInt8](repeating: 0, count: 16))
        w.u64(0)  // opsLimit below the minimum
        w.u64(8 << 10)
        w.u8(0)
        #expect(thrownStatus { () throws(KeychainError) in try KeybagRecord(decoding: w.bytes) } == .decode)
    }

    @Test func alteredWrappedKeyIsDecodeWhenTheKeybagOpens() throws {
        let record = try Keybag.create(deviceKey: deviceKey).record
        for pdmn in record.wrappedKeys.keys {
            var altered = record
            let wrapped = record.wrappedKeys[pdmn]!
            altered.wrappedKeys[pdmn] = flipping(wrapped, at: wrapped.count / 2)
            let decoded = try KeybagRecord(decoding: altered.encoded())
            #expect(thrownStatus { () throws(KeychainError) in try Keybag(deviceKey: deviceKey, record: decoded) } == .decode,
                    "\(pdmn.rawValue)")
        }
    }

    @Test func wrappedKeyMovedToAnotherClassIsDecode() throws {
        let record = try Keybag.create(deviceKey: deviceKey).record
        var swapped = record
        swapped.wrappedKeys[.always] = record.wrappedKeys[.alwaysThisDeviceOnly]
        swapped.wrappedKeys[.alwaysThisDeviceOnly] = record.wrappedKeys[.always]
        #expect(thrownStatus { () throws(KeychainError) in try Keybag(deviceKey: deviceKey, record: swapped) } == .decode)
    }

    /// Every single-bit flip of a stored keybag (no passcode) must be caught, either when the
    /// record is decoded or when its keys are unwrapped; none may yield a keybag that opens.
    @Test func everySingleBitFlipIsRejected() throws {
        let full = try Keybag.create(deviceKey: deviceKey).record.encoded()
        var accepted: [String] = []
        for index in full.indices {
            for bit in 0..<8 {
                let altered = flipping(full, at: index, bit: bit)
                let status = thrownStatus { () throws(KeychainError) in
                    try Keybag(deviceKey: deviceKey, record: KeybagRecord(decoding: altered))
                }
                if status == nil { accepted.append("byte \(index) bit \(bit)") }
            }
        }
        #expect(accepted.isEmpty, "flips accepted: \(accepted)")
    }
}
