import Foundation
import KeychainClient
import KeychainModel
import Testing

/// Argon2id (unlock, passcode changes, backup and restore) runs without the store's lock, so
/// it stalls no other client; and the wrong-passcode counter is as strict as when every
/// passcode check ran under that lock (docs/security.md, "Lock states").
@Suite("Argon2id runs outside the store's lock", .serialized)
struct DerivationOutsideTheLockTests {
    /// A real Argon2id cost (about 50 ms a derivation here), so that calls overlap.
    static let realCost = "argon2_ops = 2\nargon2_memory_mib = 64"
    /// Dearer (about 200 ms), so that a stalled get stands out from the machine's noise.
    static let slowCost = "argon2_ops = 4\nargon2_memory_mib = 128"
    let passcode = bytes("1234")
    let dk: AttributeDictionary = ["class": .string("genp"), "svce": .string("during"), "acct": .string("dk")]

    /// A daemon with an Always item (readable in every lock state) and a passcode, restarted so
    /// that it is locked since boot.
    func lockedDaemon(cost: String = realCost) throws -> RunningDaemon {
        let d = try RunningDaemon(config: cost, fastKDF: false)
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(dk.merging(["pdmn": .string("dk"), "v_Data": .data(bytes("always"))]) { $1 })
        try c.setPasscode(passcode)
        try d.restart()
        return d
    }

    /// Runs `call` on its own thread while another connection gets the dk item back to back
    /// (1 ms apart); returns how long the call took and how long each get that started during
    /// it took (seconds).
    func getLatencies(on d: RunningDaemon, during call: @escaping @Sendable () throws -> Void) throws -> (call: Double, gets: [Double]) {
        let reader = KeychainConnection(socketPath: d.socketPath)
        var query = dk
        query["r_Data"] = .bool(true)
        _ = try reader.copyMatching(query)  // connected before the call starts
        let finished = Locked<Double?>(nil)
        let failure = Locked<String?>(nil)
        let start = Date()
        Thread {
            do { try call() } catch { failure.withLock { $0 = "\(error)" } }
            finished.withLock { $0 = Date().timeIntervalSince(start) }
        }.start()
        usleep(20_000)  // let the daemon begin deriving
        var gets: [Double] = []
        while finished.withLock({ $0 }) == nil {
            let t0 = Date()
            _ = try reader.copyMatching(query)
            if finished.withLock({ $0 }) == nil || gets.isEmpty { gets.append(Date().timeIntervalSince(t0)) }
            usleep(1_000)
        }
        if let failure = failure.withLock({ $0 }) { Issue.record("the call failed: \(failure)") }
        return (finished.withLock { $0 }!, gets)
    }

    /// The gets are answered while the derivation runs: many of them (one stuck behind
    /// Argon2id would be the only one, taking most of the call), and nine in ten within a
    /// quarter of the call. Not the slowest one: with the whole test suite running beside it
    /// on 2 cores, a thread is sometimes off its core for a good part of a second.
    func expectUnstalled(_ measured: (call: Double, gets: [Double]), sourceLocation: SourceLocation = #_sourceLocation) {
        let sorted = measured.gets.sorted()
        let p90 = sorted.isEmpty ? .infinity : sorted[sorted.count * 9 / 10]
        #expect(sorted.count >= 10, "only \(sorted.count) get(s) answered during a call of \(Int(measured.call * 1000)) ms",
                sourceLocation: sourceLocation)
        #expect(p90 < measured.call / 4,
                "9 gets in 10 took up to \(Int(p90 * 1000)) ms during a call of \(Int(measured.call * 1000)) ms",
                sourceLocation: sourceLocation)
    }

    @Test func getsAreAnsweredWhileAnUnlockDerivesItsKey() throws {
        let d = try lockedDaemon(cost: Self.slowCost)
        let socket = d.socketPath, code = passcode
        let measured = try getLatencies(on: d) { try KeychainConnection(socketPath: socket).unlock(passcode: code) }
        expectUnstalled(measured)
        #expect(try KeychainConnection(socketPath: socket).status()["state"] == .string("unlocked"))
    }

    /// An item sealed under an application password (issue 29): its read runs Argon2id on the
    /// password after its lookup, without the store's lock.
    @Test func getsAreAnsweredWhileAnApplicationPasswordOpensASecret() throws {
        let d = try lockedDaemon(cost: Self.slowCost)
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.unlock(passcode: passcode)
        let context = try AuthenticationContext(connection: c)
        try context.setApplicationPassword(SecretBytes(bytes("app password")))
        try c.add(context.applied(to: ["class": .string("genp"), "svce": .string("sealed"), "accc": .string("ak;2147483648"),
                                       "v_Data": .data(bytes("s"))]))
        let measured = try getLatencies(on: d) {
            _ = try c.copyMatching(["class": .string("genp"), "svce": .string("sealed"), "r_Data": .bool(true)], context: context)
        }
        expectUnstalled(measured)
    }

    @Test func getsAreAnsweredWhileAPasscodeChangeDerivesItsKeys() throws {
        let d = try lockedDaemon(cost: Self.slowCost)
        let socket = d.socketPath, old = passcode
        let measured = try getLatencies(on: d) {
            try KeychainConnection(socketPath: socket).changePasscode(old: old, new: bytes("5678"))
        }
        expectUnstalled(measured)
        try KeychainConnection(socketPath: socket).unlock(passcode: bytes("5678"))
    }

    @Test func getsAreAnsweredWhileABackupSealsItsFile() throws {
        let d = try lockedDaemon(cost: Self.slowCost)
        let socket = d.socketPath
        try KeychainConnection(socketPath: socket).unlock(passcode: passcode)
        let measured = try getLatencies(on: d) {
            _ = try KeychainConnection(socketPath: socket).backup(password: bytes("backup password"))
        }
        expectUnstalled(measured)
    }

    @Test func getsAreAnsweredWhileARestoreOpensItsFile() throws {
        let d = try lockedDaemon(cost: Self.slowCost)
        let socket = d.socketPath
        let c = KeychainConnection(socketPath: socket)
        try c.unlock(passcode: passcode)
        try c.add(["class": .string("genp"), "svce": .string("restored"), "acct": .string("a"), "v_Data": .data([1])])
        let (file, _) = try c.backup(password: bytes("backup password"))
        try c.delete(["class": .string("genp"), "svce": .string("restored")])
        let measured = try getLatencies(on: d) {
            _ = try KeychainConnection(socketPath: socket).restore(file, password: bytes("backup password"), onConflict: .skip)
        }
        expectUnstalled(measured)
        _ = try c.copyMatching(["class": .string("genp"), "svce": .string("restored"), "acct": .string("a")])
    }

    /// `count` wrong unlocks sent at once, each on its own connection; their errors.
    func concurrentWrongUnlocks(_ d: RunningDaemon, count: Int) -> [KeychainError] {
        let errors = Locked<[KeychainError]>([])
        let socket = d.socketPath
        DispatchQueue.concurrentPerform(iterations: count) { i in
            do throws(KeychainError) {
                try KeychainConnection(socketPath: socket).unlock(passcode: bytes("wrong-\(i)"))
                Issue.record("wrong passcode \(i) was accepted")
            } catch {
                errors.withLock { $0.append(error) }
            }
        }
        return errors.withLock { $0 }
    }

    @Test func concurrentWrongPasscodesEachCount() throws {
        let d = try lockedDaemon()
        let errors = concurrentWrongUnlocks(d, count: 5)
        #expect(errors.count == 5 && errors.allSatisfy { $0.status == .authFailed && $0.message.contains("not correct") },
                "\(errors)")
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["failed_attempts"] == .int(5))
    }

    @Test func concurrentWrongPasscodesCannotGetPastTheDelay() throws {
        let d = try lockedDaemon()
        let errors = concurrentWrongUnlocks(d, count: 7)
        // The first five are checked (the fifth starts the 1-minute delay); the rest are
        // refused, as they would be one after another.
        #expect(errors.filter { $0.message.contains("not correct") }.count == 5, "\(errors)")
        #expect(errors.filter { $0.message.contains("try again in") }.count == 2, "\(errors)")
        #expect(errors.allSatisfy { $0.status == .authFailed })
        #expect(try KeychainConnection(socketPath: d.socketPath).status()["failed_attempts"] == .int(5))
    }

    /// An unlock with the old passcode racing a change away from it: whichever is applied first
    /// decides, and the keychain ends in one of the two serial outcomes.
    @Test func aPasscodeChangeRacingAnUnlockEndsAsIfOneRanFirst() throws {
        let d = try lockedDaemon()
        let socket = d.socketPath
        let c = KeychainConnection(socketPath: socket)
        var current = passcode
        for round in 1...3 {
            let next = bytes("passcode-\(round)")
            let old = current
            let unlocked = Locked<KeychainError??>(nil)
            let changed = Locked<KeychainError??>(nil)
            DispatchQueue.concurrentPerform(iterations: 2) { i in
                let connection = KeychainConnection(socketPath: socket)
                do throws(KeychainError) {
                    if i == 0 { try connection.unlock(passcode: old) } else { try connection.changePasscode(old: old, new: next) }
                    (i == 0 ? unlocked : changed).withLock { $0 = .some(nil) }
                } catch {
                    (i == 0 ? unlocked : changed).withLock { $0 = .some(error) }
                }
            }
            #expect(changed.withLock { $0 } == .some(nil), "round \(round): the change failed")
            current = next
            let status = try c.status()
            switch unlocked.withLock({ $0 }) {
            case .some(nil):  // the unlock ran first
                #expect(status["state"] == .string("unlocked"), "round \(round)")
                #expect(status["failed_attempts"] == .int(0), "round \(round)")
            case .some(let error?):  // the change ran first: the old passcode is wrong now
                #expect(error.status == .authFailed, "round \(round): \(error)")
                #expect(status["state"] == .string(round == 1 ? "lockedSinceBoot" : "locked"), "round \(round)")
                #expect(status["failed_attempts"] == .int(1), "round \(round)")
            case nil:
                Issue.record("round \(round): the unlock did not answer")
            }
            expectStatus(.authFailed) { try c.unlock(passcode: old) }
            try c.unlock(passcode: current)
            _ = try c.copyMatching(dk)
            try c.lock()
        }
    }
}
