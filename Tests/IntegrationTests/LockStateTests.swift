import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Lock states through the real daemon (docs/security.md, "Lock states").
@Suite("Lock states and accessibility classes", .serialized)
struct LockStateTests {
    let passcode = bytes("1234")

    func item(_ account: String, _ pdmn: Protection, extra: AttributeDictionary = [:]) -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("lock-test"), "acct": .string(account), "pdmn": .string(pdmn.rawValue)]
            .merging(extra) { $1 }
    }

    func name(_ account: String) -> AttributeDictionary {
        ["class": .string("genp"), "svce": .string("lock-test"), "acct": .string(account)]
    }

    /// What each state allows a class: read, add and update need the class key; delete does not.
    func available(_ pdmn: Protection, in state: String) -> Bool {
        switch state {
        case "unlocked": true
        case "locked": !pdmn.isPurgedOnLock
        default: pdmn == .always || pdmn == .alwaysThisDeviceOnly  // lockedSinceBoot
        }
    }

    @Test(arguments: Protection.allCases)
    func everyOperationInEveryLockState(pdmn: Protection) throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        for state in ["unlocked", "locked", "lockedSinceBoot"] {
            try c.add(item("read-\(state)", pdmn, extra: ["v_Data": .data(bytes("secret"))]))
            try c.add(item("update-\(state)", pdmn, extra: ["v_Data": .data(bytes("before"))]))
            try c.add(item("delete-\(state)", pdmn))
        }
        for state in ["unlocked", "locked", "lockedSinceBoot"] {
            if state == "locked" { try c.lock() }
            if state == "lockedSinceBoot" { try d.restart() }
            #expect(try c.status()["state"] == .string(state))
            let ok = available(pdmn, in: state)
            let read = { () throws -> Void in
                _ = try c.copyMatching(self.name("read-\(state)").merging(["r_Data": .bool(true)]) { $1 })
            }
            let add = { () throws -> Void in try c.add(self.item("added-\(state)", pdmn, extra: ["v_Data": .data([1])])) }
            let update = { () throws -> Void in try c.update(self.name("update-\(state)"), ["v_Data": .data(bytes("after"))]) }
            if ok {
                try read()
                try add()
                try update()
            } else {
                expectStatus(.interactionNotAllowed) { try read() }
                expectStatus(.interactionNotAllowed) { try add() }
                expectStatus(.interactionNotAllowed) { try update() }
            }
            try c.delete(name("delete-\(state)"))  // rows are deleted by their columns
        }
        // Nothing a refused call touched has changed.
        try c.unlock(passcode: passcode)
        for state in ["unlocked", "locked", "lockedSinceBoot"] {
            let ok = available(pdmn, in: state)
            let secret = try c.copyMatching(name("update-\(state)").merging(["r_Data": .bool(true)]) { $1 })
            #expect(secret == .single(.data(bytes(ok ? "after" : "before"))), "\(pdmn) \(state)")
            if ok {
                _ = try c.copyMatching(name("added-\(state)"))
            } else {
                expectStatus(.itemNotFound) { _ = try c.copyMatching(name("added-\(state)")) }
            }
            expectStatus(.itemNotFound) { _ = try c.copyMatching(name("delete-\(state)")) }
        }
    }

    /// The one lock-timing test on real time, end to end (the daemon's timer thread); the other
    /// timing rules run on a manual clock (KeychainServerTests, LockTimingTests).
    @Test func whenUnlockedKeysSurviveTheGracePeriodThenGo() throws {
        let d = try RunningDaemon(config: "lock_grace_seconds = 1")
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item("ak", .whenUnlocked, extra: ["v_Data": .data([1])]))
        try c.add(item("ck", .afterFirstUnlock, extra: ["v_Data": .data([2])]))
        try c.setPasscode(passcode)
        try c.lock()
        let status = try c.status()
        #expect(status["state"] == .string("locked"))
        #expect(status["purge_in"] == .int(1))
        _ = try c.copyMatching(name("ak"))  // still within the grace period
        usleep(1_600_000)
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(name("ak")) }
        _ = try c.copyMatching(name("ck"))
        #expect(d.log.contains("WhenUnlocked class keys purged"))
    }

    @Test func aRestartReturnsToLockedSinceBootWhenAPasscodeIsSet() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        #expect(try c.status()["state"] == .string("unlocked"))
        try c.setPasscode(passcode)
        try d.restart()
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
    }

    @Test func changingThePasscodeWhileLockedSinceBootUnlocksNothing() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item("ak", .whenUnlocked))
        try c.add(item("ck", .afterFirstUnlock))
        try c.setPasscode(passcode)
        try d.restart()
        try c.changePasscode(old: passcode, new: bytes("5678"))
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(name("ak")) }
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(name("ck")) }
        try c.unlock(passcode: bytes("5678"))
        _ = try c.copyMatching(name("ak"))
    }

    @Test func changingThePasscodeWhileLockedLeavesWhenUnlockedItemsLockedAndALaterLockPurges() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item("ak", .whenUnlocked))
        try c.setPasscode(passcode)
        try c.lock()  // the test daemon has no grace period
        try c.changePasscode(old: passcode, new: bytes("5678"))
        #expect(try c.status()["state"] == .string("locked"))
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(name("ak")) }
        try c.unlock(passcode: bytes("5678"))
        _ = try c.copyMatching(name("ak"))
        try c.lock()
        expectStatus(.interactionNotAllowed) { _ = try c.copyMatching(name("ak")) }
    }

    @Test func wrongPasscodesEscalateAndTheDelaySurvivesARestart() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        try d.restart()
        for attempt in 1...5 {
            do {
                try c.unlock(passcode: bytes("wrong-\(attempt)"))
                Issue.record("a wrong passcode was accepted")
            } catch {
                #expect(error.status == .authFailed)
                if attempt == 5 { #expect(error.message.contains("next attempt in 60 s")) }
            }
        }
        var status = try c.status()
        #expect(status["failed_attempts"] == .int(5))
        guard case .int(let wait)? = status["retry_after"] else { Issue.record("no retry_after"); return }
        #expect(wait > 50 && wait <= 60)
        try d.restart()
        status = try c.status()
        #expect(status["failed_attempts"] == .int(5))
        guard case .int(let after)? = status["retry_after"] else { Issue.record("no retry_after"); return }
        #expect(after > 0 && after <= wait)
        do {
            try c.unlock(passcode: passcode)  // even the right passcode must wait
            Issue.record("an unlock during the delay was accepted")
        } catch {
            #expect(error.status == .authFailed)
            #expect(error.message.contains("try again in"))
        }
        #expect(try c.status()["state"] == .string("lockedSinceBoot"))
    }

    @Test func emptyOrHugePasscodesAreParameterErrorsAndDoNotCount() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        expectStatus(.param) { try c.unlock(passcode: []) }
        expectStatus(.param) { try c.unlock(passcode: [UInt8](repeating: 0x61, count: 2000)) }
        expectStatus(.param) { try c.unlock(passcode: [UInt8](repeating: 0x61, count: 5000)) }  // over the frame's field limit
        #expect(try c.status()["failed_attempts"] == .int(0))
        try c.unlock(passcode: passcode)
    }

    @Test func theRightPasscodeResetsTheCount() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        for _ in 1...3 { expectStatus(.authFailed) { try c.unlock(passcode: bytes("nope")) } }
        try c.unlock(passcode: passcode)
        #expect(try c.status()["failed_attempts"] == .int(0))
    }

    @Test func sigusr1FromTheHostLocks() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        try c.unlock(passcode: passcode)
        kill(d.pid, SIGUSR1)
        var state: AttributeValue?
        for _ in 0..<100 {
            state = try c.status()["state"]
            if state == .string("locked") { break }
            usleep(20_000)
        }
        #expect(state == .string("locked"))
        #expect(d.log.contains("SIGUSR1"))
    }

    @Test func lockWithoutAPasscodeIsRefusedWithGuidance() throws {
        let d = try RunningDaemon()
        do {
            try KeychainConnection(socketPath: d.socketPath).lock()
            Issue.record("lock without a passcode succeeded")
        } catch {
            #expect(error.status == .param)
            #expect(error.message.contains("passcode set"))
        }
    }

    @Test func lockWhileLockedAndUnlockWhileUnlockedAreHarmless() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.setPasscode(passcode)
        try c.unlock(passcode: passcode)
        try c.unlock(passcode: passcode)
        expectStatus(.authFailed) { try c.unlock(passcode: bytes("wrong")) }  // still checked
        try c.lock()
        try c.lock()
        #expect(try c.status()["state"] == .string("locked"))
    }

    @Test func concurrentUnlocksAllSucceed() async throws {
        let d = try RunningDaemon()
        let setup = KeychainConnection(socketPath: d.socketPath)
        try await setup.setPasscode(passcode)
        try d.restart()
        let socket = d.socketPath
        let code = passcode
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask { try await KeychainConnection(socketPath: socket).unlock(passcode: code) }
            }
            try await group.waitForAll()
        }
        #expect(try await setup.status()["state"] == .string("unlocked"))
    }

    @Test func eraseAfterTooManyWrongPasscodesWhenConfigured() throws {
        let d = try RunningDaemon(config: "erase_after_failures = 3")
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item("dk", .always))
        try c.setPasscode(passcode)
        for attempt in 1...3 {
            do {
                try c.unlock(passcode: bytes("wrong"))
            } catch {
                #expect(error.status == .authFailed)
                if attempt == 3 { #expect(error.message.contains("erased")) }
            }
        }
        let status = try c.status()
        #expect(status["passcode"] == .bool(false))
        expectStatus(.itemNotFound) { _ = try c.copyMatching(name("dk")) }
        #expect(d.log.contains("ERASED"))
    }

    @Test func aPasscodeChangeKilledAtAnyPointStillOpensWithTheOldOrTheNew() throws {
        // A real Argon2id cost (~10-30 ms a derivation) so that kills land mid-change.
        let d = try RunningDaemon(config: "argon2_ops = 1\nargon2_memory_mib = 16", fastKDF: false)
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(item("ck", .afterFirstUnlock, extra: ["v_Data": .data([7])]))
        var current = bytes("passcode-0")
        try c.setPasscode(current)
        for round in 1...6 {
            let next = bytes("passcode-\(round)")
            let change = Process()
            change.executableURL = URL(fileURLWithPath: Binaries.keychain)
            change.arguments = ["--socket", d.socketPath, "passcode", "change"]
            let input = Pipe()
            change.standardInput = input
            change.standardError = FileHandle.nullDevice
            try change.run()
            try? input.fileHandleForWriting.write(contentsOf: Data(current + [10] + next + [10]))
            try input.fileHandleForWriting.close()
            usleep(UInt32(round * 7_000))  // kill at a different point each round
            d.crash()
            change.waitUntilExit()
            try d.start()
            // Exactly one of the two opens the keybag, and every item is intact.
            var opened = false
            for candidate in [next, current] where try unlocks(c, candidate) {
                current = candidate
                opened = true
                break
            }
            #expect(opened, "round \(round): neither passcode opens the keybag")
            #expect(try c.copyMatching(name("ck").merging(["r_Data": .bool(true)]) { $1 }) == .single(.data([7])))
        }
    }

    /// Whether `passcode` unlocks; false for a wrong one, other errors thrown.
    func unlocks(_ c: KeychainConnection, _ passcode: [UInt8]) throws -> Bool {
        do {
            try c.unlock(passcode: passcode)
            return true
        } catch {
            if error.status == .authFailed { return false }
            throw error
        }
    }
}
