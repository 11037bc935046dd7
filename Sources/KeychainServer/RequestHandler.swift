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
/// its own; a call that derives a key runs its Argon2id between two of its steps, without it.
final class RequestHandler {
    let store: ItemStore
    let lockPolicy: LockPolicy
    private(set) var machine: LockStateMachine
    /// Whether the keychain is not unlocked now (what change notices report).
    var isLocked: Bool { machine.state != .unlocked }
    private var throttle: PasscodeThrottle
    /// Moves at every lock event, passcode removal and erase: an authentication context's
    /// yes given before it no longer spares the prompt (AuthenticationContexts).
    private(set) var authenticationEpoch: UInt64 = 0
    /// The login slot's own: a stale slot tried at every login must never delay `unlock`.
    private var loginThrottle: PasscodeThrottle
    private var transfers = BackupTransfers()
    private let log: (String) -> Void
    private let clock: DaemonClock
    /// When the next expiry sweep is due (monotonic): reads already hide expired items, so
    /// the sweep only reclaims them, and opening every item is not worth doing more often.
    private var nextSweep: Double
    /// `[expiry] sweep_seconds`.
    private let sweepInterval: Double
    static let defaultSweepInterval: Double = 300

    init(store: ItemStore, lockPolicy: LockPolicy, clock: DaemonClock = .system,
         sweepInterval: Double = RequestHandler.defaultSweepInterval, log: @escaping (String) -> Void) throws(KeychainError) {
        self.store = store
        self.sweepInterval = sweepInterval
        self.clock = clock
        self.lockPolicy = lockPolicy
        self.log = log
        nextSweep = clock.monotonic()
        machine = LockStateMachine(hasPasscode: store.hasPasscode, at: clock.monotonic(),
                                   gracePeriod: lockPolicy.gracePeriod, autoLockAfter: lockPolicy.autoLockAfter)
        let saved = try store.passcodeFailures()
        throttle = PasscodeThrottle(failures: saved.failures, lastFailure: saved.lastFailure)
        let savedLogin = try store.loginSlot.failures()
        loginThrottle = PasscodeThrottle(failures: savedLogin.failures, lastFailure: savedLogin.lastFailure)
    }

    /// `policy` is the access policy in force for this call (a reload may replace it between
    /// calls). A call that derives a key runs all its steps here, holding whatever lock the
    /// caller holds throughout; the StoreExecutor runs them one by one instead.
    /// `sealedSecret`: an add's or update's secret already sealed under the call's application
    /// password (StoreExecutor, outside the lock).
    /// `allowedByPerson`: the items that ask first whose update the person allowed (StoreExecutor).
    func handle(_ request: Request, from caller: Caller, policy: AccessPolicy, sealedSecret: SecretBytes? = nil,
                allowedByPerson: Set<[UInt8]> = []) -> Response {
        switch begin(request, from: caller, policy: policy, sealedSecret: sealedSecret, allowedByPerson: allowedByPerson) {
        case .answered(let response):
            return response
        case .derive(let derivation):
            return finish(derivation, Result { () throws(KeychainError) in try derivation.run() }, from: caller)
        case .useKey(let call):
            return Self.answer(call)
        }
    }

    enum Step {
        case answered(Response)
        /// The call continues with Argon2id, then `finish`.
        case derive(Derivation)
        /// A key call (sign, verify, agree, encrypt, decrypt, public key): its key's row is out
        /// of the store, still sealed; opening and using the key are left to the caller
        /// (outside the store's lock), then `answer`.
        case useKey(FoundKeyCall)
    }

    /// The answer of a prepared key call: needs nothing of the handler, so it runs anywhere.
    static func answer(_ call: PreparedKeyCall) -> Response {
        do throws(KeychainError) {
            return Response(result: .single(try call.run()))
        } catch {
            return Response(error: error)
        }
    }

    /// The answer of a key call whose key is not opened yet (one that asks first is refused:
    /// nobody is asked here).
    static func answer(_ call: FoundKeyCall) -> Response {
        do throws(KeychainError) {
            return answer(try call.opened())
        } catch {
            return Response(error: error)
        }
    }

    /// Checks a call and runs it, or, for one that derives a key, checks it (the wrong-passcode
    /// delay included: no Argon2id runs during a delay) and copies what its derivation needs.
    func begin(_ request: Request, from caller: Caller, policy: AccessPolicy, sealedSecret: SecretBytes? = nil,
               allowedByPerson: Set<[UInt8]> = []) -> Step {
        // A monitor polling status must not keep the keychain from auto-locking.
        if request != .status { noteActivity() }
        defer { if request.isAdministrative { settle() } }
        do {
            let scope = try authorize(request, caller: caller, policy: policy)
            if let derivation = try prepare(request) { return .derive(derivation) }
            if let call = try prepareKeyCall(request, scope: scope) { return .useKey(call) }
            return .answered(try perform(request, scope: scope, caller: caller, policy: policy, sealedSecret: sealedSecret,
                                         allowedByPerson: allowedByPerson))
        } catch {
            return .answered(Response(error: error))
        }
    }

    /// A key call's key, its row read, with its checked parameters; nil for any other call.
    private func prepareKeyCall(_ request: Request, scope: AccessScope) throws(KeychainError) -> FoundKeyCall? {
        switch request {
        case .keyPublic(let query): try store.keys.publicKeyExport(query, scope: scope)
        case .keySign(let query, let parameters): try store.keys.signature(query, parameters: parameters, scope: scope)
        case .keyVerify(let query, let parameters): try store.keys.verification(query, parameters: parameters, scope: scope)
        case .keyAgree(let query, let parameters): try store.keys.agreement(query, parameters: parameters, scope: scope)
        case .keyEncrypt(let query, let parameters): try store.keys.encryption(query, parameters: parameters, scope: scope)
        case .keyDecrypt(let query, let parameters): try store.keys.decryption(query, parameters: parameters, scope: scope)
        default: nil
        }
    }

    /// For a call that runs outside the handler (sync): the refusal it gets, or nil when the
    /// caller may make it. Counts as activity, like any call.
    func refusal(of request: Request, from caller: Caller, policy: AccessPolicy) -> Response? {
        noteActivity()
        do throws(KeychainError) {
            _ = try authorize(request, caller: caller, policy: policy)
            return nil
        } catch {
            return Response(error: error)
        }
    }

    /// Installs what a derivation produced: the keybag change (counted as a right or wrong
    /// passcode), the sealed backup, the restored items.
    func finish(_ derivation: Derivation, _ outcome: Result<Derivation.Output, KeychainError>, from caller: Caller) -> Response {
        noteActivity()
        defer { settle() }
        do {
            return try install(derivation, outcome, caller: caller)
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

    private func authorize(_ request: Request, caller: Caller, policy: AccessPolicy) throws(KeychainError) -> AccessScope {
        if request.isAdministrative && !policy.isAdmin(caller) {
            throw KeychainError(.missingEntitlement, "\(request.operation) is an admin call; uid \(caller.uid) is not an admin of this keychaind")
        }
        let scope = policy.scope(for: caller)
        if scope.groups.isEmpty && request.needsAccessGroups {
            throw KeychainError(.missingEntitlement, policy.refusal(for: caller))
        }
        return scope
    }

    /// The derivation of a call that derives a key, after its checks; nil for any other call.
    private func prepare(_ request: Request) throws(KeychainError) -> Derivation? {
        switch request {
        case .unlock(let passcode):
            guard store.hasPasscode else { return nil }  // always unlocked without one: perform answers
            try checkThrottle()
            return .unlock(store.keybagSnapshot(), passcode: passcode)
        case .setPasscode(let new):
            return .setPasscode(store.keybagSnapshot(), new: new)
        case .changePasscode(let old, let new):
            try checkThrottle()
            return .changePasscode(store.keybagSnapshot(), old: old, new: new)
        case .removePasscode(let current):
            try checkThrottle()
            return .removePasscode(store.keybagSnapshot(), current: current)
        case .backupBegin(let password):
            try ItemStore.checkBackupPassword(password)
            // Exported under the lock (one consistent view, and the keys it needs are loaded);
            // encoded and sealed without it.
            return .backup(try store.backupExporter.contents(), password: password)
        case .restoreCommit(let session, let password, let policy):
            return .restore(file: try transfers.take(session), password: password, onConflict: policy)
        case .loginSlotAdd(let password):
            return .loginSlotAdd(try store.loginSlot.snapshot(), password: password)
        case .loginUnlock(let password):
            guard store.hasPasscode else { return nil }  // always unlocked without one: perform answers
            let snapshot = try store.loginSlot.snapshot()
            try requireCurrent(snapshot.slot)
            try checkLoginThrottle()
            return .loginUnlock(snapshot, password: password)
        case .loginSlotRewrap(let old, let new) where !old.isEmpty:
            let snapshot = try store.loginSlot.snapshot()
            try requireCurrent(snapshot.slot)
            do {
                try checkLoginThrottle()
            } catch {
                // The login password has changed and the slot cannot follow it now.
                try markStale(reason: "its rewrap was refused during the login slot's delay")
                throw error
            }
            return .loginSlotRewrap(snapshot, old: old, new: new)
        default:
            return nil
        }
    }

    private func install(_ derivation: Derivation, _ outcome: Result<Derivation.Output, KeychainError>,
                         caller: Caller) throws(KeychainError) -> Response {
        // A passcode call computed from a keybag another one has replaced since is not counted:
        // its verdict was on a passcode that may no longer be the keychain's.
        if let snapshot = derivation.snapshot, !store.isCurrent(snapshot) { throw KeybagChange.superseded }
        switch derivation {
        case .unlock:
            try counted(outcome) { (change) throws(KeychainError) in try store.apply(change) }
            machine.unlocked(at: clock.monotonic())
            log("unlocked by \(caller)")
        case .setPasscode:
            try store.apply(try outcome.get().keybagChange())
            log("passcode set by \(caller)")
        case .changePasscode:
            try counted(outcome) { (change) throws(KeychainError) in try store.apply(change) }
            log("passcode changed by \(caller)")
        case .removePasscode:
            let deleted = try counted(outcome) { (change) throws(KeychainError) in try store.apply(change) }
            machine.passcodeRemoved(at: clock.monotonic())
            authenticationEpoch += 1
            log("passcode removed by \(caller); \(deleted) when-passcode-set item(s) deleted")
        case .backup:
            guard case .backupFile(let backup) = try outcome.get() else {
                throw KeychainError(.internal, "a backup derived no file")
            }
            let session = try transfers.offer(backup.file, at: clock.monotonic())
            log("backup of \(backup.itemCount) item(s) for \(caller); \(backup.excluded) item(s) left out (ThisDeviceOnly, non-extractable keys)")
            return Response(result: .single(.attributes([
                "session": .int(Int64(session)), "size": .int(Int64(backup.file.count)),
                "items": .int(Int64(backup.itemCount)), "excluded": .int(Int64(backup.excluded)), "note": .string(backup.note)])))
        case .loginSlotAdd(let snapshot, _):
            let slot = try outcome.get().loginSlot()
            guard try store.loginSlot.current() == snapshot.slot else { throw KeybagChange.superseded }
            try store.loginSlot.save(slot)
            resetLoginThrottle()
            log("login slot \(snapshot.slot == nil ? "added" : "replaced") by \(caller)")
        case .loginUnlock(let snapshot, _):
            guard try store.loginSlot.current() == snapshot.slot else { throw KeybagChange.superseded }
            try countedLogin(outcome) { (output) throws(KeychainError) in _ = try store.apply(try output.keybagChange()) }
            machine.unlocked(at: clock.monotonic())
            log("unlocked through the login slot by \(caller)")
        case .loginSlotRewrap(let snapshot, _, _):
            guard try store.loginSlot.current() == snapshot.slot else { throw KeybagChange.superseded }
            do {
                try countedLogin(outcome) { (output) throws(KeychainError) in try store.loginSlot.save(try output.loginSlot()) }
            } catch where error.status == .authFailed {
                try markStale(reason: "the old login password given to its rewrap did not open it")
                throw KeychainError(.authFailed, "\(error.message); the login slot is now stale: unlock with the passcode, then `keychain passcode login-slot add`")
            }
            log("login slot rewrapped for a new login password by \(caller)")
        case .restore(_, _, let onConflict):
            guard case .restoredItems(let backup) = try outcome.get() else {
                throw KeychainError(.internal, "a restore derived no items")
            }
            let header = backup.header
            let summary = try store.restorer.restore(backup, onConflict: onConflict)
            log("restore for \(caller): \(summary.restored) restored, \(summary.skipped) skipped, \(summary.replaced) replaced")
            return Response(result: .single(.attributes([
                "restored": .int(Int64(summary.restored)), "skipped": .int(Int64(summary.skipped)),
                "replaced": .int(Int64(summary.replaced)), "excluded": .int(Int64(header.excludedCount)),
                "note": .string(header.note)])))
        }
        return Response()
    }

    private func perform(_ request: Request, scope: AccessScope, caller: Caller, policy: AccessPolicy,
                         sealedSecret: SecretBytes?, allowedByPerson: Set<[UInt8]>) throws(KeychainError) -> Response {
        switch request {
        case .add(let dict):
            return Response(result: try store.items.add(dict, scope: scope, sealedSecret: sealedSecret))
        case .copyMatching(let dict):
            return Response(result: try store.items.copyMatching(dict, scope: scope))
        case .update(let query, let changes):
            try store.items.update(query, changes: changes, scope: scope, sealedSecret: sealedSecret, allowedByPerson: allowedByPerson)
        case .delete(let dict):
            try store.items.delete(dict, scope: scope)
        case .keyGenerate(let dict):
            return Response(result: try store.keys.generateKey(dict, scope: scope))
        case .keyPublic, .keySign, .keyVerify, .keyAgree, .keyEncrypt, .keyDecrypt:
            throw KeychainError(.internal, "\(request.operation) is a key call, prepared before perform")
        case .status:
            return Response(result: .single(.attributes(status(scope, forBridge: policy.isBridge(caller.executable)))))
        case .lock:
            guard store.hasPasscode else {
                throw KeychainError(.param, "no passcode is set, so the keychain cannot be locked; set one with `keychain passcode set`")
            }
            lock(reason: "lock call from \(caller)")
        case .unlock:
            return Response()  // no passcode: always unlocked (with one, the call derives a key)
        case .backupRead(let session, let offset):
            return Response(result: .single(.data(SecretBytes(try transfers.read(session, offset: offset)))))
        case .restoreBegin(let size):
            let session = try transfers.expect(size: size, at: clock.monotonic())
            return Response(result: .single(.attributes(["session": .int(Int64(session))])))
        case .restoreWrite(let session, let offset, let bytes):
            try transfers.write(session, offset: offset, bytes: bytes)
        case .attributeSearch(let collection, let exact, let pairs):
            let rows = try store.attributeIndex.search(collection: collection, exact: exact, pairs: pairs, scope: scope)
            return Response(result: .list(rows.map(ItemResult.attributes)))
        case .attributeAdd(let dict, let replace):
            return Response(result: .single(.attributes(try store.attributeIndex.add(dict, replace: replace, scope: scope))))
        case .portalSecret(let appID):
            return Response(result: .single(.data(try store.portalSecrets.secret(appID: appID))))
        case .attributeSecrets(let refs):
            return Response(result: .list(try store.attributeIndex.secrets(of: refs, scope: scope).map(ItemResult.attributes)))
        case .asCaller:
            throw KeychainError(.internal, "asCaller reached the store: the server unwraps it")
        case .changeSubscribe:
            throw KeychainError(.internal, "changeSubscribe reached the store: the server serves it")
        case .setPasscode, .changePasscode, .removePasscode, .backupBegin, .restoreCommit:
            throw KeychainError(.internal, "\(request.operation) derives a key: it runs in steps")
        case .syncStatus, .syncCreate, .syncJoin, .syncApprove, .syncDevices, .syncNow, .syncRemove, .syncLeave:
            throw KeychainError(.internal, "\(request.operation) talks to PostgreSQL: it runs outside the handler")
        case .loginSlotRemove:
            guard try store.loginSlot.current() != nil else { throw Self.noLoginSlot }
            try store.loginSlot.save(nil)
            resetLoginThrottle()
            log("login slot removed by \(caller)")
        case .loginSlotStatus:
            return Response(result: .single(.attributes(loginSlotStatus(at: clock.wall()))))
        case .loginUnlock:
            return Response()  // no passcode: always unlocked (with one, the call derives a key)
        case .loginSlotRewrap:
            // No old password (a reset by root): the slot cannot follow, so it opens nothing more.
            guard try store.loginSlot.current() != nil else { throw Self.noLoginSlot }
            try markStale(reason: "the login password was reset without the old one")
        case .loginSlotAdd:
            throw KeychainError(.internal, "\(request.operation) derives a key: it runs in steps")
        case .metrics:
            throw KeychainError(.internal, "metrics are answered by the executor, which holds them")
        case .unlockPrompt:
            throw KeychainError(.internal, "unlockPrompt asks the person: the executor runs it outside the handler")
        case .credentialLookup(let dict):
            return Response(result: .single(.attributes(try CredentialLookup(dict).run(in: store, policy: policy))))
        case .contextCreate, .contextAuthenticate, .contextInvalidate, .contextSetCredential:
            throw KeychainError(.internal, "\(request.operation) reached the store: the executor serves contexts")
        }
        return Response()
    }

    /// A lock event from any source: the keys go at once or after the grace period.
    func lock(reason: String) {
        let actions = machine.lock(at: clock.monotonic())
        authenticationEpoch += 1
        if machine.purgeAt != nil || !actions.isEmpty {
            log("locked (\(reason)); WhenUnlocked keys purged \(lockPolicy.gracePeriod > 0 ? "in \(Int(lockPolicy.gracePeriod)) s" : "now")")
        }
        apply(actions)
    }

    /// Time-driven events: grace periods ending, idle auto-lock, the expiry sweep.
    func tick() {
        let wasUnlocked = machine.state == .unlocked
        let now = clock.monotonic()
        let actions = machine.tick(at: now, hasPasscode: store.hasPasscode)
        if wasUnlocked && machine.state == .locked {
            authenticationEpoch += 1
            log("locked (idle for \(Int(lockPolicy.autoLockAfter)) s)")
        }
        apply(actions)
        if now >= nextSweep {
            nextSweep = now + sweepInterval
            do {
                let swept = try store.items.sweepExpired()
                if swept > 0 { log("expiry sweep: \(swept) expired item(s) deleted") }
            } catch {
                log("expiry sweep failed: \(error.message)")
            }
        }
    }

    func nextDeadline() -> Double? {
        min(machine.nextDeadline(hasPasscode: store.hasPasscode) ?? .infinity, nextSweep)
    }

    private func apply(_ actions: [LockStateMachine.Action]) {
        for action in actions {
            switch action {
            case .purgeWhenUnlockedKeys:
                log("WhenUnlocked class keys purged")
            }
        }
        settle()
    }

    /// The start of a check of a passcode typed at keychaind's prompt (an item that asks
    /// first): refused during a wrong-passcode delay, as `unlock` is.
    func presenceCheckSnapshot() throws(KeychainError) -> KeybagSnapshot {
        noteActivity()
        guard store.hasPasscode else {
            throw KeychainError(.interactionNotAllowed, "the item asks for the keychain passcode, and the keychain has none: set one with `keychain passcode set`")
        }
        try checkThrottle()
        return store.keybagSnapshot()
    }

    /// Counts a passcode typed at the prompt as `unlock` counts one; nothing is loaded.
    func countPresenceCheck(_ snapshot: KeybagSnapshot, _ outcome: Result<KeybagChange, KeychainError>) throws(KeychainError) {
        defer { settle() }
        guard store.isCurrent(snapshot) else { throw KeybagChange.superseded }
        try counted(outcome.map { Derivation.Output.keybag($0) }) { (_) throws(KeychainError) in }
    }

    /// Whether unlockPrompt (op 53) has anything to ask: false when the keychain is unlocked or
    /// has no passcode (then it answers success without asking); errSecAuthFailed during a
    /// wrong-passcode delay, before any prompt, as `unlock` is refused.
    func unlockPromptNeeded() throws(KeychainError) -> Bool {
        noteActivity()
        guard store.hasPasscode, machine.state != .unlocked else { return false }
        try checkThrottle()
        return true
    }

    /// The derivation of one passcode typed at unlockPrompt's prompt: `unlock`'s first step
    /// without the caller's admin right (the person typed it, not the caller). `finish` then
    /// counts and installs it exactly as `unlock`'s. nil: no passcode any more, so unlocked.
    func promptedUnlock(_ passcode: SecretBytes) throws(KeychainError) -> Derivation? {
        noteActivity()
        guard store.hasPasscode else { return nil }
        try checkThrottle()
        return .unlock(store.keybagSnapshot(), passcode: passcode)
    }

    /// The escalating-delay schedule, before a passcode check: refused while a delay is in
    /// force, before any Argon2id, so that a guesser cannot even spend the daemon's time.
    private func checkThrottle() throws(KeychainError) {
        let wait = throttle.retryAfter(at: clock.wall())
        guard wait <= 0 else {
            throw KeychainError(.authFailed, "too many wrong passcodes (\(throttle.failures)): try again in \(Int(wait.rounded(.up))) s")
        }
    }

    /// The schedule after a passcode check: a wrong passcode counts (and may erase, if
    /// configured); a right one resets once `install` has applied its change. Checks run one
    /// at a time (the StoreExecutor's derivation gate), so each is counted before the next
    /// one's `checkThrottle`, as when every check ran under the store's lock.
    @discardableResult
    private func counted<T>(_ outcome: Result<Derivation.Output, KeychainError>,
                            _ install: (KeybagChange) throws(KeychainError) -> T) throws(KeychainError) -> T {
        do {
            let result = try install(try outcome.get().keybagChange())
            if throttle.failures > 0 {
                throttle.succeeded()
                try? store.savePasscodeFailures(0, lastFailure: 0)
            }
            return result
        } catch where error.status == .authFailed {
            throttle.failed(at: clock.wall())
            try? store.savePasscodeFailures(throttle.failures, lastFailure: throttle.lastFailure)
            log("wrong passcode (\(throttle.failures) in a row)")
            if lockPolicy.eraseAfterFailures > 0 && throttle.failures >= lockPolicy.eraseAfterFailures {
                try store.erase()
                authenticationEpoch += 1
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

    // MARK: the login slot

    static let noLoginSlot = KeychainError(.itemNotFound, "this keychain has no login slot; add one with `keychain passcode login-slot add`")

    /// A slot to unlock or rewrap with: none is errSecItemNotFound, a stale one
    /// errSecNotAvailable; neither runs Argon2id nor counts as a wrong password.
    private func requireCurrent(_ slot: LoginSlot?) throws(KeychainError) {
        switch slot {
        case nil: throw Self.noLoginSlot
        case .stale: throw KeychainError(.notAvailable, "the login slot is stale (the login password changed without it): unlock with the passcode, then `keychain passcode login-slot add`")
        case .current: break
        }
    }

    private func markStale(reason: String) throws(KeychainError) {
        try store.loginSlot.save(.stale)
        log("login slot marked stale: \(reason)")
    }

    /// As `checkThrottle`, on the login slot's own counter and the same schedule.
    private func checkLoginThrottle() throws(KeychainError) {
        let wait = loginThrottle.retryAfter(at: clock.wall())
        guard wait <= 0 else {
            throw KeychainError(.authFailed, "too many wrong login passwords (\(loginThrottle.failures)): the login slot opens again in \(Int(wait.rounded(.up))) s; `keychain unlock` with the passcode is not delayed")
        }
    }

    private func resetLoginThrottle() {
        guard loginThrottle.failures > 0 else { return }
        loginThrottle.succeeded()
        try? store.loginSlot.saveFailures(0, lastFailure: 0)
    }

    /// A login-slot check's verdict on the slot's own counter, never the passcode's, and never
    /// an erase (erase_after_failures counts wrong passcodes only).
    private func countedLogin(_ outcome: Result<Derivation.Output, KeychainError>,
                              _ install: (Derivation.Output) throws(KeychainError) -> Void) throws(KeychainError) {
        do {
            try install(try outcome.get())
            resetLoginThrottle()
        } catch where error.status == .authFailed {
            loginThrottle.failed(at: clock.wall())
            try? store.loginSlot.saveFailures(loginThrottle.failures, lastFailure: loginThrottle.lastFailure)
            log("wrong login password for the login slot (\(loginThrottle.failures) in a row)")
            let next = PasscodeThrottle.delay(afterFailures: loginThrottle.failures)
            throw KeychainError(.authFailed, next > 0
                ? "the login password does not open the login slot; \(loginThrottle.failures) wrong in a row: next attempt in \(Int(next)) s"
                : "the login password does not open the login slot")
        }
    }

    private func loginSlotStatus(at wall: Double) -> AttributeDictionary {
        [
            "login_slot": .string(LoginSlot.stateName((try? store.loginSlot.current()) ?? nil)),
            "failed_attempts": .int(Int64(loginThrottle.failures)),
            "retry_after": .int(Int64(loginThrottle.retryAfter(at: wall).rounded(.up))),
        ]
    }

    /// `forBridge`: the caller is the Secret Service bridge itself (not a caller it speaks
    /// for), which alone is told the generation: it tells every app of a write by any client
    /// of any group, which the bridge turns into one collection-wide signal.
    private func status(_ scope: AccessScope, forBridge: Bool) -> AttributeDictionary {
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
        // Without a passcode nothing is locked, so there is no login slot to speak of.
        if store.hasPasscode {
            info["login_slot"] = .string(LoginSlot.stateName((try? store.loginSlot.current()) ?? nil))
            info["login_slot_retry_after"] = .int(Int64(loginThrottle.retryAfter(at: wall).rounded(.up)))
        }
        if let s = machine.secondsUntilAutoLock(at: mono, hasPasscode: store.hasPasscode) {
            info["auto_lock_in"] = .int(Int64(s.rounded(.up)))
        }
        if let purge = machine.purgeAt {
            info["purge_in"] = .int(Int64(max(0, purge - mono).rounded(.up)))
        }
        if forBridge, let generation = try? store.generation() {
            info["generation"] = .int(generation)
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
