import KeychainModel
import KeychainStore
import Testing
import StoreTestSupport

@Suite("Class keys decide what is readable; the passcode protects them")
struct LockAndPasscodeTests {
    let passcode = bytes("correct horse")

    /// A store with one item of each protection class that exists without a passcode, then a
    /// passcode set, one akpu item, and a restart (locked since boot).
    func lockedSinceBoot() throws -> TemporaryStore {
        let t = try TemporaryStore()
        for pdmn in Protection.allCases where pdmn != .whenPasscodeSetThisDeviceOnly {
            try t.add(genp("s", pdmn.rawValue, ["pdmn": .string(pdmn.rawValue), "v_Data": .data(bytes(pdmn.rawValue))]))
        }
        try t.store.setPasscode(passcode)
        try t.add(genp("s", "akpu", ["pdmn": .string("akpu"), "v_Data": .data(bytes("akpu"))]))
        try t.reopen()
        return t
    }

    @Test func beforeFirstUnlockOnlyAlwaysItemsAreReadable() throws {
        let t = try lockedSinceBoot()
        for pdmn in Protection.allCases {
            let query = genp("s", pdmn.rawValue)
            switch pdmn {
            case .always, .alwaysThisDeviceOnly:
                #expect(try t.secret(query) == bytes(pdmn.rawValue))
            default:
                expectStatus(.interactionNotAllowed) { _ = try t.copy(query) }
            }
        }
    }

    @Test func attributeOnlyQueriesOfALockedClassFailToo() throws {
        let t = try lockedSinceBoot()
        expectStatus(.interactionNotAllowed) { _ = try t.attributes(genp("s", "ak")) }
    }

    @Test func theLockedMessageNamesTheClassAsPeopleKnowItNotByItsCode() throws {
        let t = try lockedSinceBoot()
        do {
            _ = try t.copy(genp("s", "aku"))
            Issue.record("a locked read succeeded")
        } catch let error as KeychainError {
            #expect(error.status == .interactionNotAllowed)
            #expect(error.message.contains("when-unlocked-this-device-only items"), "\(error.message)")
            #expect(!error.message.contains(" aku "), "\(error.message)")
        }
    }

    @Test func oneLockedRowFailsTheWholeQuery() throws {
        let t = try lockedSinceBoot()
        expectStatus(.interactionNotAllowed) { _ = try t.count(["class": .string("genp"), "svce": .string("s")]) }
    }

    @Test func unlockWithTheRightPasscodeMakesEverythingReadable() throws {
        let t = try lockedSinceBoot()
        try t.store.unlock(passcode: passcode)
        for pdmn in Protection.allCases {
            #expect(try t.secret(genp("s", pdmn.rawValue)) == bytes(pdmn.rawValue))
        }
    }

    @Test func wrongPasscodeIsRejectedAndUnlocksNothing() throws {
        let t = try lockedSinceBoot()
        expectStatus(.authFailed) { try t.store.unlock(passcode: bytes("wrong")) }
        expectStatus(.param) { try t.store.unlock(passcode: []) }
        expectStatus(.param) { try t.store.unlock(passcode: [UInt8](repeating: 0x61, count: 1025)) }
        expectStatus(.interactionNotAllowed) { _ = try t.copy(genp("s", "ck")) }
    }

    @Test func lockPurgesWhenUnlockedKeysButKeepsAfterFirstUnlock() throws {
        let t = try lockedSinceBoot()
        try t.store.unlock(passcode: passcode)
        t.store.lock()
        for pdmn in Protection.allCases {
            let query = genp("s", pdmn.rawValue)
            if pdmn.isPurgedOnLock {
                expectStatus(.interactionNotAllowed) { _ = try t.copy(query) }
            } else {
                #expect(try t.secret(query) == bytes(pdmn.rawValue))
            }
        }
    }

    @Test func addingToALockedClassFailsAndWritesNothing() throws {
        let t = try lockedSinceBoot()
        let before = try t.store.itemCount()
        expectStatus(.interactionNotAllowed) { try t.add(genp("s", "new", ["pdmn": .string("ak")])) }
        expectStatus(.interactionNotAllowed) { try t.add(genp("s", "new", ["pdmn": .string("cku")])) }
        #expect(try t.store.itemCount() == before)
        try t.add(genp("s", "new", ["pdmn": .string("dku")]))
    }

    @Test func updatingALockedItemFailsAndChangesNothing() throws {
        let t = try lockedSinceBoot()
        expectStatus(.interactionNotAllowed) {
            try t.store.items.update(genp("s", "ak"), changes: ["v_Data": .data([0])], scope: TemporaryStore.app)
        }
        expectStatus(.interactionNotAllowed) {
            try t.store.items.update(genp("s", "dk"), changes: ["pdmn": .string("ak")], scope: TemporaryStore.app)
        }
        try t.store.unlock(passcode: passcode)
        #expect(try t.secret(genp("s", "ak")) == bytes("ak"))
        #expect(try t.attributes(genp("s", "dk"))?["pdmn"] == .string("dk"))
    }

    @Test func deletingByColumnsWorksWhileLocked() throws {
        let t = try lockedSinceBoot()
        try t.store.items.delete(genp("s", "ak"), scope: TemporaryStore.app)
        try t.store.unlock(passcode: passcode)
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "ak")) }
    }

    @Test func whenPasscodeSetItemsCannotBeAddedWithoutAPasscode() throws {
        let t = try TemporaryStore()
        expectStatus(.notAvailable) { try t.add(genp("s", "a", ["pdmn": .string("akpu")])) }
        #expect(try t.store.itemCount() == 0)
    }

    @Test func removingThePasscodeDeletesWhenPasscodeSetItemsOnly() throws {
        let t = try lockedSinceBoot()
        try t.store.unlock(passcode: passcode)
        #expect(try t.store.removePasscode(current: passcode) == 1)
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "akpu")) }
        try t.reopen()  // no passcode: everything loads at start
        for pdmn in Protection.allCases where pdmn != .whenPasscodeSetThisDeviceOnly {
            #expect(try t.secret(genp("s", pdmn.rawValue)) == bytes(pdmn.rawValue))
        }
        // Setting a passcode again does not bring the old akpu items back.
        try t.store.setPasscode(passcode)
        expectStatus(.itemNotFound) { _ = try t.copy(genp("s", "akpu")) }
    }

    @Test func removingThePasscodeNeedsTheCurrentOne() throws {
        let t = try lockedSinceBoot()
        expectStatus(.authFailed) { try t.store.removePasscode(current: bytes("nope")) }
        #expect(t.store.hasPasscode)
    }

    @Test func changingThePasscodeKeepsEveryItemReadable() throws {
        let t = try lockedSinceBoot()
        expectStatus(.authFailed) { try t.store.changePasscode(old: bytes("nope"), new: bytes("new")) }
        try t.store.changePasscode(old: passcode, new: bytes("new passcode"))
        try t.reopen()
        expectStatus(.authFailed) { try t.store.unlock(passcode: passcode) }
        try t.store.unlock(passcode: bytes("new passcode"))
        for pdmn in Protection.allCases {
            #expect(try t.secret(genp("s", pdmn.rawValue)) == bytes(pdmn.rawValue))
        }
    }

    @Test func settingAPasscodeTwiceIsRefused() throws {
        let t = try TemporaryStore()
        try t.store.setPasscode(passcode)
        expectStatus(.param) { try t.store.setPasscode(bytes("other")) }
    }
}
