#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore

/// How the lock state behaves (config: lock_grace_seconds, auto_lock_seconds,
/// erase_after_failures).
public struct LockPolicy: Sendable, Equatable {
    /// Seconds the WhenUnlocked keys stay after a lock event (Apple: 10).
    public var gracePeriod: Double = 10
    /// Lock after this many seconds without any call; 0: never.
    public var autoLockAfter: Double = 0
    /// Erase the keychain after this many wrong passcodes in a row; 0: never.
    public var eraseAfterFailures = 0

    public init() {}
}

/// Turns one request into one response against the store, and owns the lock state and the
/// wrong-passcode counter. Used only under the StoreExecutor's lock, so it needs no locking of
/// its own.
final class RequestHandler {
    let store: ItemStore
    let lockPolicy: LockPolicy
    private(set) var machine: LockStateMachine
    private var throttle: PasscodeThrottle
    private var transfers = BackupTransfers()
    private let log: (String) -> Void
    private let clock: DaemonClock

    init(store: ItemStore, lockPolicy: LockPolicy, clock: DaemonClock = .system,
         log: @escaping (String) -> Void) throws(KeychainError) {
        self.store = store
        self.clock = clock
        self.lockPolicy = lockPolicy
        self.log = log
        machine = LockStateMachine(hasPasscode: store.hasPasscode, at: clock.monotonic(),
                                   gracePeriod: lockPolicy.gracePeriod, autoLockAfter: lockPolicy.autoLockAfter)
        let saved = try store.passcodeFailures()
        throttle = PasscodeThrottle(failures: saved.failures, lastFailure: saved.lastFailure)
    }

    /// `policy` is the access policy in force for this call (a reload may replace it between
    /// calls).
    func handle(_ request: Request, from caller: Caller, policy: AccessPolicy) -> Response {
        // A monitor polling status must not keep the keychain from auto-locking.
        if request != .status { noteActivity() }
        defer { if request.isAdministrative { settle() } }
        do {
            return try perform(request, caller: caller, policy: policy)
        } catch {
            return Response(error: error)
        }
    }

    /// Makes the keybag hold exactly the class keys the lock state allows. Every path that
    /// loads or drops keys (unlock, passcode set, change and removal, erase, lock events,
    /// the end of a grace period) ends here, so the keybag and the state machine cannot
    /// disagree whatever an operation did to the keys on its way.
    private func settle() {
        let hasPasscode = store.hasPasscode
        store.keepOnly { machine.mayHoldKey($0, hasPasscode: hasPasscode) }
    }

    func noteActivity() { machine.activity(at: clock.monotonic()) }

    private func perform(_ request: Request, caller: Caller, policy: AccessPolicy) throws(KeychainError) -> Response {
        if request.isAdministrative && !policy.isAdmin(caller) {
            throw KeychainError(.missingEntitlement, "\(request.operation) is an admin call; uid \(caller.uid) is not an admin of this keychaind")
        }
        let scope = policy.scope(for: caller)
        if scope.groups.isEmpty && request.needsAccessGroups {
            throw KeychainError(.missingEntitlement, policy.refusal(for: caller))
        }
        switch request {
        case .add(let dict):
            return Response(result: try store.add(dict, scope: scope))
        case .copyMatching(let dict):
            return Response(result: try store.copyMatching(dict, scope: scope))
        case .update(let query, let changes):
            try store.update(query, changes: changes, scope: scope)
        case .delete(let dict):
            try store.delete(dict, scope: scope)
        case .status:
            return Response(result: .single(.attributes(status(scope))))
        case .lock:
            guard store.hasPasscode else {
                throw KeychainError(.param, "no passcode is set, so the keychain cannot be locked; set one with `keychain passcode set`")
            }
            lock(reason: "lock call from \(caller)")
        case .unlock(let passcode):
            guard store.hasPasscode else { return Response() }  // always unlocked without one
            try withThrottle { () throws(KeychainError) in try store.unlock(passcode: passcode) }
            machine.unlocked(at: clock.monotonic())
            log("unlocked by \(caller)")
        case .setPasscode(let new):
            try store.setPasscode(new)
            log("passcode set by \(caller)")
        case .changePasscode(let old, let new):
            try withThrottle { () throws(KeychainError) in try store.changePasscode(old: old, new: new) }
            log("passcode changed by \(caller)")
        case .removePasscode(let current):
            let deleted = try withThrottle { () throws(KeychainError) in try store.removePasscode(current: current) }
            machine.passcodeRemoved(at: clock.monotonic())
            log("passcode removed by \(caller); \(deleted) when-passcode-set item(s) deleted")
        case .backupBegin(let password):
            return Response(result: .single(.attributes(try backup(password: password, caller: caller))))
        case .backupRead(let session, let offset):
            return Response(result: .single(.data(SecretBytes(try transfers.read(session, offset: offset)))))
        case .restoreBegin(let size):
            let session = try transfers.expect(size: size, at: clock.monotonic())
            return Response(result: .single(.attributes(["session": .int(Int64(session))])))
        case .restoreWrite(let session, let offset, let bytes):
            try transfers.write(session, offset: offset, bytes: bytes)
        case .restoreCommit(let session, let password, let onConflict):
            return Response(result: .single(.attributes(try restore(session, password: password, onConflict: onConflict, caller: caller))))
        }
        return Response()
    }

    /// Seals every migratable item into a backup file held for the client to read.
    private func backup(password: SecretBytes, caller: Caller) throws(KeychainError) -> AttributeDictionary {
        try ItemStore.checkBackupPassword(password)
        let (items, excluded) = try store.exportMigratableItems()
        let payload = BackupPayload.encode(items)
        let note = excluded == 0 ? "no ThisDeviceOnly items" :
            "\(excluded) ThisDeviceOnly item(s) (aku, cku, dku, akpu) left out: they never leave this device"
        let file = try BackupFile.seal(payload: payload, itemCount: items.count, excludedCount: excluded, note: note,
                                       password: password, parameters: store.configuration.argon2)
        let session = try transfers.offer(file, at: clock.monotonic())
        log("backup of \(items.count) item(s) for \(caller); \(excluded) ThisDeviceOnly item(s) left out")
        return ["session": .int(Int64(session)), "size": .int(Int64(file.count)),
                "items": .int(Int64(items.count)), "excluded": .int(Int64(excluded)), "note": .string(note)]
    }

    /// Opens a received backup file and restores it in one transaction.
    private func restore(_ session: UInt64, password: SecretBytes, onConflict: String, caller: Caller) throws(KeychainError) -> AttributeDictionary {
        guard let policy = ConflictPolicy(rawValue: onConflict) else {
            throw KeychainError(.param, "on-conflict must be skip, replace or fail")
        }
        let file = try transfers.take(session)
        let (header, payload) = try BackupFile.open(file, password: password)
        let items = try BackupPayload.decode(payload)
        guard items.count == header.itemCount else {
            throw KeychainError(.decode, "the backup holds \(items.count) items but its header says \(header.itemCount)")
        }
        let summary = try store.importItems(items, onConflict: policy)
        log("restore for \(caller): \(summary.restored) restored, \(summary.skipped) skipped, \(summary.replaced) replaced")
        return ["restored": .int(Int64(summary.restored)), "skipped": .int(Int64(summary.skipped)),
                "replaced": .int(Int64(summary.replaced)), "excluded": .int(Int64(header.excludedCount)),
                "note": .string(header.note)]
    }

    /// A lock event from any source: the keys go at once or after the grace period.
    func lock(reason: String) {
        let actions = machine.lock(at: clock.monotonic())
        if machine.purgeAt != nil || !actions.isEmpty {
            log("locked (\(reason)); WhenUnlocked keys purged \(lockPolicy.gracePeriod > 0 ? "in \(Int(lockPolicy.gracePeriod)) s" : "now")")
        }
        apply(actions)
    }

    /// Time-driven events: grace periods ending, idle auto-lock.
    func tick() {
        let wasUnlocked = machine.state == .unlocked
        let actions = machine.tick(at: clock.monotonic(), hasPasscode: store.hasPasscode)
        if wasUnlocked && machine.state == .locked { log("locked (idle for \(Int(lockPolicy.autoLockAfter)) s)") }
        apply(actions)
    }

    func nextDeadline() -> Double? { machine.nextDeadline(hasPasscode: store.hasPasscode) }

    private func apply(_ actions: [LockStateMachine.Action]) {
        for action in actions {
            switch action {
            case .purgeWhenUnlockedKeys:
                log("WhenUnlocked class keys purged")
            }
        }
        settle()
    }

    /// Runs a passcode check under the escalating-delay schedule: refused while a delay is in
    /// force; a wrong passcode counts (and may erase, if configured); a right one resets.
    private func withThrottle<T>(_ body: () throws(KeychainError) -> T) throws(KeychainError) -> T {
        let now = clock.wall()
        let wait = throttle.retryAfter(at: now)
        guard wait <= 0 else {
            throw KeychainError(.authFailed, "too many wrong passcodes (\(throttle.failures)): try again in \(Int(wait.rounded(.up))) s")
        }
        do {
            let result = try body()
            if throttle.failures > 0 {
                throttle.succeeded()
                try? store.savePasscodeFailures(0, lastFailure: 0)
            }
            return result
        } catch where error.status == .authFailed {
            throttle.failed(at: now)
            try? store.savePasscodeFailures(throttle.failures, lastFailure: throttle.lastFailure)
            log("wrong passcode (\(throttle.failures) in a row)")
            if lockPolicy.eraseAfterFailures > 0 && throttle.failures >= lockPolicy.eraseAfterFailures {
                try store.erase()
                throttle.succeeded()
                machine.passcodeRemoved(at: clock.monotonic())
                log("keychain ERASED after \(lockPolicy.eraseAfterFailures) wrong passcodes (erase_after_failures)")
                throw KeychainError(.authFailed, "the passcode is not correct; after \(lockPolicy.eraseAfterFailures) wrong passcodes the keychain has been erased")
            }
            let next = PasscodeThrottle.delay(afterFailures: throttle.failures)
            throw KeychainError(.authFailed, next > 0
                ? "the passcode is not correct; \(throttle.failures) wrong in a row: next attempt in \(Int(next)) s"
                : "the passcode is not correct")
        }
    }

    private func status(_ scope: AccessScope) -> AttributeDictionary {
        let mono = clock.monotonic()
        let wall = clock.wall()
        var info: AttributeDictionary = [
            "version": .string(KeychainVersion.current),
            "state": .string(machine.state.rawValue),
            "since": .date(wall - (mono - machine.since) - absoluteTimeIntervalSince1970),
            "passcode": .bool(store.hasPasscode),
            "groups": .string(scope.groups.joined(separator: ",")),
            "failed_attempts": .int(Int64(throttle.failures)),
            "retry_after": .int(Int64(throttle.retryAfter(at: wall).rounded(.up))),
        ]
        if let s = machine.secondsUntilAutoLock(at: mono, hasPasscode: store.hasPasscode) {
            info["auto_lock_in"] = .int(Int64(s.rounded(.up)))
        }
        if let purge = machine.purgeAt {
            info["purge_in"] = .int(Int64(max(0, purge - mono).rounded(.up)))
        }
        return info
    }
}

/// The daemon's clocks: monotonic for time-outs, wall for what must survive a restart.
/// Injected, so that lock-state rules are tested on a made-up clock without sleeping.
public struct DaemonClock: Sendable {
    public var monotonic: @Sendable () -> Double
    public var wall: @Sendable () -> Double

    public init(monotonic: @escaping @Sendable () -> Double, wall: @escaping @Sendable () -> Double) {
        self.monotonic = monotonic
        self.wall = wall
    }

    public static let system = DaemonClock(
        monotonic: { Double(MonotonicClock.nanoseconds()) / 1e9 },
        wall: {
            var ts = timespec()
            clock_gettime(CLOCK_REALTIME, &ts)
            return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
        })
}
