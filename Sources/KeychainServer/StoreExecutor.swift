import Foundation
import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore
import KeychainSync
import Synchronization

/// The one owner of the store. A request runs on its connection's own thread while holding
/// the store's lock, so a call costs no thread hand-off (each wake-up costs tens of
/// microseconds on the machines here). Writes commit in groups: a writer queues its request,
/// then takes the lock; whoever holds it runs every queued write in one transaction with a
/// single fsync, so eight clients adding at once pay for about one durable commit, not eight.
/// A writer whose request a previous holder already committed finds its answer waiting and
/// returns at once. Every reply is sent only after its commit. A call that runs Argon2id
/// (unlock, passcode changes, backup, restore) holds the lock before and after it, not during
/// it; a key call (sign, agree, decrypt...) holds it to read its key's row, not to open or use it.
///
/// Everything mutable sits in a Mutex, so it cannot be touched without its lock.
final class StoreExecutor: Sendable {
    /// A write waiting for the next group commit.
    private struct Write: Sendable {
        let id: UInt64
        let request: Request
        let caller: Caller
        let policy: AccessPolicy
        /// The process whose connection sent it (the bridge's, for a call made for another).
        let writerPID: Int32
        /// Its secret sealed under its application password (`sealForApplicationPassword`).
        let sealedSecret: SecretBytes?
        /// The items that ask first the person allowed it to change (`askBeforeUpdate`).
        let allowedByPerson: Set<[UInt8]>
    }

    /// What the store's lock guards.
    private struct Store {
        /// nil once stopped.
        var handler: RequestHandler?
        /// Answers to writes that another writer's group committed, until their writers
        /// take them.
        var answered: [UInt64: Response] = [:]
        /// The store's outboxQueuedChanges when the sync thread was last woken for it.
        var syncQueuedSeen: UInt64 = 0
        /// When the last group of writes committed (DaemonClock's monotonic seconds), until
        /// the timer thread checkpoints the log once writes have paused; nil: nothing since.
        var lastWrite: Double?
        /// The lock state change notices last reported (op 47).
        var noticedLocked = false
    }

    /// How long writes must pause before the log is checkpointed (ItemStore.checkpointLog):
    /// long enough that a burst of writes keeps SQLite's longer log, short enough that the
    /// reads after it search no log.
    static let checkpointAfterIdle = 0.5

    private struct WriteQueue {
        var lastID: UInt64 = 0
        var pending: [Write] = []
    }

    private let store: PthreadMutex<Store>
    /// Its own lock, so that writers queue while a group commits: what makes the groups.
    private let writes = PthreadMutex(WriteQueue())
    /// Held by a call that derives a key from its first step to its last, so that one Argon2id
    /// runs at a time: it takes 256 MiB at the default cost, and clients sending many at once
    /// would otherwise take a multiple of it. It also queues passcode checks behind each
    /// other as the store's lock did, so that each wrong passcode is counted before the next
    /// check looks at the wrong-passcode delay. Taken before the store's lock, never after.
    private let derivationGate = Mutex<Void>(())
    /// keychaind's prompt (`[prompt]`, read at start); nil: nobody can be asked.
    private let presencePrompt: PresencePrompt?
    /// Held while a prompt is shown: one person answers them, one at a time.
    private let promptGate = Mutex<Void>(())
    /// polkit's prompt (`[prompt] polkit`), tried before pinentry; nil: off.
    private let polkitPrompt: PolkitPrompt?
    /// Why polkit could not ask, for the log (never a secret: polkit's answers hold none).
    private let note: @Sendable (String) -> Void
    /// The authentication contexts of every connection (ops 49-52).
    let contexts: AuthenticationContexts
    /// unlockPrompt's shared outcomes and its bound on unanswered prompts.
    private let unlockPrompts = Mutex(UnlockPromptLedger())
    /// How long pinentry waits for the person at an unlock prompt (the PKCS#11 module waits
    /// longer for the answer: docs/pkcs11.md).
    static let unlockPromptTimeout = 120
    /// Wrong application passwords per item, across connections.
    private let passwordThrottle = ApplicationPasswordThrottle()

    /// What a config reload replaces: read once per call under its own lock, never the
    /// store's, so that it adds no contention on the hot path.
    private struct Settings: Sendable {
        var policy: AccessPolicy
        var audit: AuditLog?
        /// For the parts of a read outside the store's lock; nil once stopped.
        var reader: SplitReader?
    }

    private let settings: PthreadMutex<Settings>
    /// Set with `settings`, read on every request without a lock: a lock taken twice per
    /// request by every client was one more place for them to queue.
    private let executablesMatter: Atomic<Bool>

    /// Wakes the timer thread early (a lock event may have set an earlier deadline, or the
    /// executor stopped). A semaphore, not a condition: a wake-up sent while the timer is
    /// busy is kept, not lost.
    private let timerWake = DispatchSemaphore(value: 0)

    /// Makes a prepared key call, outside the store's lock. Always `RequestHandler.answer` but
    /// in tests, which hold a key call here to show who is served meanwhile.
    private let useKey: @Sendable (PreparedKeyCall) -> Response

    /// The subscribers of change notices (op 47), told of each committed Secret Service change
    /// and lock-state change.
    let notices = ChangeNotices()

    /// The sync calls and the sync thread, which talk to PostgreSQL between short holds of the lock.
    private let sync: SyncCalls

    /// Counts and timings of the calls answered, and the server's connections (issue 27).
    let metrics = DaemonMetrics()

    /// Whether any application is told apart by its executable. Only then does each request
    /// re-check its process's executable: otherwise the executable grants nothing, and the
    /// check would cost every call a system call for no promise.
    var identifiesByExecutable: Bool { executablesMatter.load(ordering: .relaxed) }

    /// Whether polkit may be asked about callers: then each connection's start time is read.
    var asksThroughPolkit: Bool { polkitPrompt != nil }

    init(store itemStore: sending ItemStore, policy: AccessPolicy, lockPolicy: LockPolicy, audit: AuditLog?,
         syncDatabase: String? = nil, syncTiming: SyncLoop.Timing = SyncLoop.Timing(), prompt: PresencePrompt? = nil,
         polkit: PolkitPrompt? = nil, contextMaxAge: Double = Double(PromptSettings().contextMaxAge),
         sweepInterval: Double = RequestHandler.defaultSweepInterval,
         useKey: @escaping @Sendable (PreparedKeyCall) -> Response = RequestHandler.answer,
         log: @escaping @Sendable (String) -> Void) throws(KeychainError) {
        self.useKey = useKey
        sync = SyncCalls(database: syncDatabase, timing: syncTiming, log: log)
        presencePrompt = prompt
        polkitPrompt = polkit
        note = log
        contexts = AuthenticationContexts(maxAge: contextMaxAge)
        let reader = itemStore.splitReader
        let handler = try RequestHandler(store: itemStore, lockPolicy: lockPolicy, sweepInterval: sweepInterval, log: log)
        let lockedAtStart = handler.isLocked
        store = PthreadMutex(Store(handler: handler, noticedLocked: lockedAtStart))
        settings = PthreadMutex(Settings(policy: policy, audit: audit, reader: reader))
        executablesMatter = Atomic(policy.identifiesByExecutable)
        let thread = Thread { [self] in self.runTimer() }
        thread.name = "keychaind-lock-timer"
        thread.start()
        sync.loop.startIfReady(store: LockedStore(executor: self))
    }

    /// A lock event from the host (a signal, a session-lock hook).
    func lock(reason: String) {
        notices.publish(store.withLock { store in
            store.handler?.lock(reason: reason)
            return lockStateNotices(&store)
        })
        timerWake.signal()
    }

    /// Runs time-driven lock events (grace periods ending, idle auto-lock) when they are due,
    /// until the executor stops.
    private func runTimer() {
        while true {
            let (next, changed) = store.withLock { (store) -> (Double??, [ChangeNotice]) in
                guard let handler = store.handler else { return (nil, []) }
                handler.tick()
                var deadline = handler.nextDeadline()
                if let written = store.lastWrite {
                    let due = written + Self.checkpointAfterIdle
                    if DaemonClock.system.monotonic() >= due {
                        handler.store.checkpointLog()
                        store.lastWrite = nil
                    } else {
                        deadline = min(deadline ?? due, due)
                    }
                }
                return (.some(deadline), lockStateNotices(&store))
            }
            notices.publish(changed)
            guard let deadline = next else { return }
            let wait = deadline.map { max(0.001, $0 - DaemonClock.system.monotonic()) } ?? 3600
            _ = timerWake.wait(timeout: .now() + wait)
        }
    }

    /// Runs `request` against the store, records it in the audit log, and returns its response.
    /// A long list answer goes in pages: every page but the last is handed to `emit` (which
    /// sends it, and says false when the client is gone), the last is returned.
    /// `bridgePID`: the call came through the Secret Service bridge of that pid, for `caller`.
    /// `connection`: the number of the caller's own connection (AuthenticationContexts), nil
    /// for a call made for another process, which can hold no context.
    func submit(_ request: Request, from caller: Caller, bridgePID: Int32? = nil, connection: UInt64? = nil,
                emit: (Response) -> Bool = { _ in true }) -> Response {
        let current = settings.withLock { $0 }
        let started = MonotonicClock.nanoseconds()
        let owner = connection.map { ContextOwner(connection: $0, uid: caller.uid, pid: caller.pid) }
        var response = run(request, from: caller, policy: current.policy, reader: current.reader, writerPID: bridgePID ?? caller.pid,
                           owner: owner, emit: emit)
        if request == .status, let owner, case .single(.attributes(var info)) = response.result {
            let open = contexts.count(connection: owner.connection)
            if open > 0 {
                info["contexts"] = .int(Int64(open))
                response.result = .single(.attributes(info))
            }
        }
        metrics.record(request, status: response.status, nanoseconds: Int64(MonotonicClock.nanoseconds() &- started),
                       viaBridge: bridgePID != nil)
        // The bridge asks for status every second to learn of changes (docs/secret-service.md,
        // "Changes made outside the bridge"): a line each time would bury the calls that matter.
        if request == .status && bridgePID == nil && current.policy.isBridge(caller.executable) { return response }
        current.audit?.record(request, caller: caller, app: current.policy.appID(for: caller),
                              defaultGroup: current.policy.scope(for: caller).groups.first, response: response,
                              bridgePID: bridgePID)
        return response
    }

    /// The access policy in force now.
    var policy: AccessPolicy { settings.withLock { $0.policy } }

    /// Replaces the access policy and the audit log (a config reload); calls already running
    /// finish under the old ones.
    func reload(policy: AccessPolicy, audit: AuditLog?) {
        settings.withLock {
            $0.policy = policy
            $0.audit = audit
            executablesMatter.store(policy.identifiesByExecutable, ordering: .relaxed)
        }
    }

    private func run(_ request: Request, from caller: Caller, policy: AccessPolicy, reader: SplitReader?,
                     writerPID: Int32, owner: ContextOwner?, emit: (Response) -> Bool) -> Response {
        if case .metrics = request { return metricsAnswer(for: caller, policy: policy) }
        if case .copyMatching(let query) = request {
            guard let reader else { return Self.stopping }
            return search(query, from: caller, policy: policy, reader: reader, owner: owner, emit: emit)
        }
        switch request {
        case .contextCreate, .contextAuthenticate, .contextInvalidate, .contextSetCredential:
            return contextCall(request, from: caller, policy: policy, owner: owner)
        default: break
        }
        if request.isSync {
            let refusal = store.withLock { (store) -> Response? in
                guard let handler = store.handler else { return Self.stopping }
                return handler.refusal(of: request, from: caller, policy: policy)
            }
            if let refusal { return refusal }
            return sync.run(request, store: LockedStore(executor: self), admin: policy.isAdmin(caller))
        }
        if case .unlockPrompt = request {
            let response = unlockThroughPrompt(for: caller, policy: policy)
            if response.status == 0 { unlocked() }
            return response
        }
        if request.derivesKey {
            let response = deriving(request, from: caller, policy: policy)
            timerWake.signal()
            switch request {
            case .unlock, .loginUnlock:
                unlocked()
            case .restoreCommit:
                sync.loop.wake()  // restored synchronizable items queue pushes
                // Restored items are not named one by one: subscribers re-read.
                if response.status == 0 { notices.publish([Self.unnamedChange]) }
            default: break
            }
            return response
        }
        if Self.usesAKey(request) { return usingKey(request, from: caller, policy: policy, owner: owner) }
        guard request.writesItems else {
            let response = locked { $0.handle(request, from: caller, policy: policy) }
            if request.isAdministrative { timerWake.signal() }
            if case .attributeSearch = request { return Self.paged(response, emit: emit) }
            if case .attributeSecrets = request { return Self.paged(response, emit: emit) }
            return response
        }
        let sealedSecret: SecretBytes?
        let allowedByPerson: Set<[UInt8]>
        let queued: Request  // a key generation sealed under an application password: its add
        do throws(KeychainError) {
            // The person first: no secret is sealed for an update they refuse.
            allowedByPerson = try askBeforeUpdate(request, from: caller, policy: policy, owner: owner)
            (queued, sealedSecret) = try sealForApplicationPassword(request, owner: owner)
        } catch {
            return Response(error: error)
        }
        let id = writes.withLock { queue in
            queue.lastID += 1
            queue.pending.append(Write(id: queue.lastID, request: queued, caller: caller, policy: policy, writerPID: writerPID,
                                       sealedSecret: sealedSecret, allowedByPerson: allowedByPerson))
            return queue.lastID
        }
        let (response, queuedSync, changed) = store.withLock { (store) -> (Response, Bool, [ChangeNotice]) in
            // Committed by the previous holder's group (which woke the sync thread if needed).
            if let response = store.answered.removeValue(forKey: id) { return (response, false, []) }
            // Ours is among these: it was queued before this lock was taken, and not answered.
            let group = writes.withLock { queue in
                defer { queue.pending.removeAll(keepingCapacity: true) }
                return queue.pending
            }
            let responses: [Response]
            var changed: [ChangeNotice] = []
            if let handler = store.handler {
                handler.store.notesSecretServiceChanges = notices.hasSubscribers
                if group.count == 1 {
                    responses = [handler.handle(group[0].request, from: caller, policy: policy, sealedSecret: group[0].sealedSecret,
                                                allowedByPerson: group[0].allowedByPerson)]
                    changed = Self.notices(of: group[0], responses[0], handler)
                } else {
                    (responses, changed) = Self.runGrouped(group, handler)
                }
            } else {
                responses = group.map { _ in Self.stopping }
            }
            var own = Self.stopping
            for (write, response) in zip(group, responses) {
                if write.id == id { own = response } else { store.answered[write.id] = response }
            }
            // The first write since the last checkpoint gives the timer a deadline to wake for.
            if store.lastWrite == nil { timerWake.signal() }
            store.lastWrite = DaemonClock.system.monotonic()
            // One compare for a write of sync = 0 items: only a queued push wakes the sync thread.
            guard let queued = store.handler?.store.outboxQueuedChanges, queued != store.syncQueuedSeen else { return (own, false, changed) }
            store.syncQueuedSeen = queued
            return (own, true, changed)
        }
        notices.publish(changed)
        if queuedSync { sync.loop.wake() }
        return response
    }

    /// After a call that may have unlocked: ck, which the sync thread waits for, may be loaded
    /// now; rows that waited in the inbox for a class key can be applied.
    private func unlocked() {
        timerWake.signal()
        sync.loop.startIfReady(store: LockedStore(executor: self))
        sync.loop.wake()
    }

    /// Op 45: the exposition, its gauges read now (admin only: lock state and the timing of
    /// every call are not for any local user).
    private func metricsAnswer(for caller: Caller, policy: AccessPolicy) -> Response {
        guard policy.isAdmin(caller) else {
            return Response(error: KeychainError(.missingEntitlement, "metrics is an admin call; uid \(caller.uid) is not an admin of this keychaind"))
        }
        return Response(result: .single(.data(SecretBytes(metricsExposition().utf8))))
    }

    /// The metrics' text exposition, its gauges read now: for an admin's op 45, or the
    /// scraper's listener (MetricsListener), which the config alone opens.
    func metricsExposition() -> String {
        let (locked, backlog) = store.withLock { (store) -> (Bool, Int?) in
            guard let handler = store.handler else { return (true, nil) }
            return (handler.machine.state != .unlocked, try? handler.store.replica.outbox.entries().count)
        }
        let lastPass = sync.loop.report?.status.lastSuccessfulPass
        let sinceSync = lastPass.map { (DaemonClock.system.wall() - absoluteTimeIntervalSince1970) - Double($0) / 1000 }
        return metrics.exposition(locked: locked, outboxEntries: backlog, secondsSinceSync: sinceSync)
    }

    /// A call that runs Argon2id holds the store's lock only to check it and copy what it needs,
    /// and to install the result: every other call goes on meanwhile.
    private func deriving(_ request: Request, from caller: Caller, policy: AccessPolicy) -> Response {
        // A backup carries the secrets of items that ask first, readable with a password the
        // caller chose: the person allows it as they allow a read (outside every lock).
        var allowed = 0
        if case .backupBegin = request, policy.isAdmin(caller) {
            let asking: Int = store.withLock { (store) -> Int? in try? store.handler?.store.backupExporter.asksFirstCount() } ?? 0
            if asking > 0 {
                do {
                    try confirmPresence(for: caller, label: nil, reason: nil,
                                        purpose: "make a backup of this keychain that holds the secrets of \(asking) item(s) that ask first or that an application password seals")
                } catch {
                    return Response(error: error)
                }
                allowed = asking
            }
        }
        return derivationGate.withLock { _ in
            let step = store.withLock { $0.handler?.begin(request, from: caller, policy: policy) }
            guard case .derive(let derivation)? = step else {
                if case .answered(let response)? = step { return response }
                return Self.stopping
            }
            if case .backup(let contents, _) = derivation, contents.asksFirst > allowed {
                return Response(error: KeychainError(.interactionNotAllowed, "an item that asks first was added as the backup began; run the backup again"))
            }
            let outcome = Result { () throws(KeychainError) in try derivation.run() }
            return locked { $0.finish(derivation, outcome, from: caller) }
        }
    }

    private static func usesAKey(_ request: Request) -> Bool {
        switch request {
        case .keyPublic, .keySign, .keyVerify, .keyAgree, .keyEncrypt, .keyDecrypt: true
        default: false
        }
    }

    /// A key call holds the lock only to read its key's row; opening the key and using it, the
    /// costly step (a KDF over a frame of shared info takes seconds), run on the caller's
    /// thread alongside other calls, so key users use every core and hold nobody up.
    private func usingKey(_ request: Request, from caller: Caller, policy: AccessPolicy, owner: ContextOwner?) -> Response {
        var context: UsedContext?
        do throws(KeychainError) {
            // As for a read: another connection's reference fails the call before the key is opened.
            if let query = Self.keyQuery(of: request) { context = try usedContext(query, owner: owner) }
        } catch {
            return Response(error: error)
        }
        switch store.withLock({ $0.handler?.begin(request, from: caller, policy: policy) }) {
        case .useKey(let call)?:
            do throws(KeychainError) {
                return useKey(try permitted(try unsealed(try call.opened(), for: request, owner: owner), for: caller, context: context))
            } catch {
                return Response(error: error)
            }
        case .answered(let response)?: return response
        case .derive?: return Response(error: KeychainError(.internal, "a key call asked for a key derivation"))
        case nil: return Self.stopping
        }
    }

    /// A key call whose key is sealed under an application password (sign, decrypt, agree),
    /// with the key opened by the password of the context its query names (u_CredRef), as an
    /// item's secret is opened (`openSealed`: the same delays, counted by the sealing's salt);
    /// outside the store's lock. Before any prompt: a wrong password asks nobody.
    private func unsealed(_ call: PreparedKeyCall, for request: Request, owner: ContextOwner?) throws(KeychainError) -> PreparedKeyCall {
        guard call.needsUnsealing, let sealed = call.sealed else { return call }
        let query: AttributeDictionary
        switch request {
        case .keySign(let q, _), .keyAgree(let q, _), .keyDecrypt(let q, _): query = q
        default: return call
        }
        guard case .data(let given)? = query["u_CredRef"] else { throw SecItems.noApplicationPassword }
        guard let owner else { throw AuthenticationContexts.unknown }
        guard let password = try contexts.credential(Array(given), for: owner) else { throw SecItems.noApplicationPassword }
        return try call.unsealed(try openSealed(sealed.layer, item: [], password: password))
    }

    private static func keyQuery(of request: Request) -> AttributeDictionary? {
        switch request {
        case .keyPublic(let query), .keySign(let query, _), .keyVerify(let query, _), .keyAgree(let query, _),
             .keyEncrypt(let query, _), .keyDecrypt(let query, _): query
        default: nil
        }
    }

    /// The one place where a key use whose key asks first (userPresence or devicePasscode)
    /// gets the person's yes, after the store's lock is released: an authenticated context the
    /// call carries (u_CredRef) gives it without a prompt for the context's life; otherwise
    /// u_AuthUI Fail is errSecInteractionNotAllowed, and keychaind's prompt asks, once per use,
    /// its yes authenticating the context the call carries.
    private func permitted(_ call: PreparedKeyCall, for caller: Caller, context: UsedContext?) throws(KeychainError) -> PreparedKeyCall {
        guard let question = call.question else { return call }
        try personAllows(CallerPresence(executor: self, caller: caller, context: context),
                         label: question.label, reason: question.reason, mayAsk: question.mayAsk,
                         keychainPasscode: question.keychainPasscode)
        return call.allowedByPerson()
    }

    /// A read holds the lock only for its SQL lookups: parsing before them, and decryption and
    /// the result after them, run on the caller's thread alongside other calls. A list answer
    /// is sent in frames as its pages are read.
    private func search(_ query: AttributeDictionary, from caller: Caller, policy: AccessPolicy, reader: SplitReader,
                        owner: ContextOwner?, emit: (Response) -> Bool) -> Response {
        do throws(KeychainError) {
            let scope = policy.scope(for: caller)
            if scope.groups.isEmpty { throw KeychainError(.missingEntitlement, policy.refusal(for: caller)) }
            var frames = AnswerFrames()
            // A reference that is not this connection's fails the call before anything is read,
            // whether or not an item would ask.
            let presence = CallerPresence(executor: self, caller: caller, context: try usedContext(query, owner: owner))
            let answer = try reader.copyMatching(query, scope: scope, store: ReadLookup(executor: self), presence: presence) { (page) throws(KeychainError) in
                for result in page { try frames.add(result, emit: emit) }
            }
            guard case .list = answer else { return Response(result: answer) }
            return Response(result: .list(frames.pending))
        } catch {
            return Response(error: error)
        }
    }

    /// The secret of the one item `query` finds in `scope`, for the credential socket: its peer
    /// is a unit's set-up process, not a caller of the policy, so the scope comes from the
    /// credential's unit (CredentialSocket), not from a caller.
    func secret(_ query: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> SecretBytes {
        guard let reader = settings.withLock({ $0.reader }) else { throw Self.stoppingError }
        var found: SecretBytes?
        let answer = try reader.copyMatching(query, scope: scope, store: ReadLookup(executor: self)) { (page) throws(KeychainError) in
            if case .data(let bytes)? = page.first { found = bytes }
        }
        if case .single(.data(let bytes)) = answer { return bytes }
        guard let found else { throw KeychainError(.itemNotFound, "no item") }
        return found
    }

    /// The authentication context a call carries (`u_CredRef`), checked to be its connection's.
    private struct UsedContext {
        let reference: [UInt8]
        let owner: ContextOwner
    }

    /// The context `query` carries, if any: errSecParam when it is not one of this
    /// connection's and process's, whether or not anything would ask.
    private func usedContext(_ query: AttributeDictionary, owner: ContextOwner?) throws(KeychainError) -> UsedContext? {
        guard case .data(let given)? = query["u_CredRef"] else { return nil }
        guard let owner else { throw AuthenticationContexts.unknown }
        let reference = Array(given)
        _ = try contexts.authentication(reference, for: owner)
        return UsedContext(reference: reference, owner: owner)
    }

    /// The person's yes for one call, outside the store's lock: an authenticated context the
    /// call carries gives it without a prompt; otherwise u_AuthUI Fail is
    /// errSecInteractionNotAllowed, and keychaind's prompt asks (authenticating the context,
    /// as an LAContext is evaluated on first use).
    private func personAllows(_ presence: CallerPresence, label: String?, reason: String?, mayAsk: Bool,
                              keychainPasscode: Bool) throws(KeychainError) {
        if try presence.confirmedBefore() { return }
        guard mayAsk else {
            throw KeychainError(.interactionNotAllowed, "the item asks the person first, and the call said not to ask (u_AuthUI Fail)")
        }
        try presence.confirm(label: label, reason: reason, keychainPasscode: keychainPasscode)
    }

    /// An update that would change items that ask first asks the person once, before its
    /// write is queued and with no lock held (the question is found in one short hold). The
    /// answer names the items by persistent id: the write, under the lock, changes no other
    /// item that asks. Empty when nothing asks.
    private func askBeforeUpdate(_ request: Request, from caller: Caller, policy: AccessPolicy,
                                 owner: ContextOwner?) throws(KeychainError) -> Set<[UInt8]> {
        guard case .update(let match, let changes) = request else { return [] }
        let context = try usedContext(match, owner: owner)
        let scope = policy.scope(for: caller)
        if scope.groups.isEmpty { return [] }  // the update itself says why not
        let found = try store.withLock { (store) throws(KeychainError) -> UpdateQuestion? in
            guard let handler = store.handler else { throw StoreExecutor.stoppingError }
            return try handler.store.items.updateQuestion(match, changes: changes, scope: scope)
        }
        guard let question = found else { return [] }
        try personAllows(CallerPresence(executor: self, caller: caller, context: context),
                         label: question.label, reason: question.reason, mayAsk: question.mayAsk,
                         keychainPasscode: question.keychainPasscode)
        return question.items
    }

    /// The person asked for one caller's read, outside the store's lock; an authenticated
    /// context the call carries answers for them, and a yes given here authenticates it.
    private struct CallerPresence: PresenceCheck {
        let executor: StoreExecutor
        let caller: Caller
        let context: UsedContext?

        func confirmedBefore() throws(KeychainError) -> Bool {
            guard let context else { return false }
            return try executor.contexts.isAuthenticated(context.reference, for: context.owner, now: DaemonClock.system.monotonic(),
                                                         epoch: try executor.authenticationEpoch())
        }

        func hasApplicationPassword() throws(KeychainError) -> Bool {
            guard let context else { return false }
            return try executor.contexts.credential(context.reference, for: context.owner) != nil
        }

        func openSealedSecret(_ sealed: SecretBytes, item persistentID: [UInt8]) throws(KeychainError) -> SecretBytes {
            guard let context, let password = try executor.contexts.credential(context.reference, for: context.owner) else {
                throw KeychainError(.interactionNotAllowed, "the item's secret is sealed under an application password, and the call's context holds none")
            }
            return try executor.openSealed(sealed, item: persistentID, password: password)
        }

        func confirm(label: String?, reason: String?) throws(KeychainError) {
            try confirm(label: label, reason: reason, keychainPasscode: false)
        }

        func confirm(label: String?, reason: String?, keychainPasscode: Bool) throws(KeychainError) {
            let epoch = try executor.authenticationEpoch()
            try executor.confirmPresence(for: caller, label: label, reason: reason, keychainPasscode: keychainPasscode)
            if let context {
                executor.contexts.authenticated(context.reference, for: context.owner,
                                                .init(at: DaemonClock.system.monotonic(), epoch: epoch))
            }
        }
    }

    /// The handler's authentication epoch now (a short hold of the store's lock).
    func authenticationEpoch() throws(KeychainError) -> UInt64 {
        try store.withLock { (store) throws(KeychainError) -> UInt64 in
            guard let handler = store.handler else { throw StoreExecutor.stoppingError }
            return handler.authenticationEpoch
        }
    }

    /// Ops 49, 50 and 52: contexts of the caller's own connection. contextAuthenticate asks
    /// the person now, outside every lock, as a read that asks does.
    private func contextCall(_ request: Request, from caller: Caller, policy: AccessPolicy, owner: ContextOwner?) -> Response {
        do throws(KeychainError) {
            guard let owner else { throw KeychainError(.param, "authentication contexts are made on the caller's own connection") }
            if policy.scope(for: caller).groups.isEmpty { throw KeychainError(.missingEntitlement, policy.refusal(for: caller)) }
            switch request {
            case .contextCreate:
                return Response(result: .single(.data(SecretBytes(try contexts.create(for: owner)))))
            case .contextAuthenticate(let reference, let reason):
                _ = try contexts.authentication(reference, for: owner)
                let epoch = try authenticationEpoch()
                try confirmPresence(for: caller, label: nil, reason: reason, forContext: true)
                contexts.authenticated(reference, for: owner, .init(at: DaemonClock.system.monotonic(), epoch: epoch))
            case .contextInvalidate(let reference):
                try contexts.invalidate(reference, for: owner)
            case .contextSetCredential(let reference, let credential):
                try contexts.setCredential(credential.isEmpty ? nil : GuardedBytes(copying: credential), reference, for: owner)
            default:
                throw KeychainError(.internal, "\(request.operation) is not a context call")
            }
            return Response()
        } catch {
            return Response(error: error)
        }
    }

    /// The add of an item whose accc holds applicationPassword, or an update of a secret that
    /// carries a context: the secret sealed under the context's application password, with
    /// Argon2id run here, on the caller's thread, with no lock but the derivation gate held.
    /// nil when there is nothing to seal (the store then refuses an item that needed it).
    /// A key generation sealed so is made here as the add of a key generated here (its bytes
    /// must be sealed before the write is queued): the request to queue comes back with it.
    private func sealForApplicationPassword(_ request: Request, owner: ContextOwner?) throws(KeychainError) -> (Request, SecretBytes?) {
        let query: AttributeDictionary
        let secret: AttributeValue?
        var queued = request
        switch request {
        case .add(let dict):
            guard Self.needsApplicationPassword(dict) else { return (request, nil) }
            query = dict
            secret = dict["v_Data"]
        case .keyGenerate(let dict):
            guard Self.needsApplicationPassword(dict) else { return (request, nil) }
            let item = try KeyStore.generatedItem(dict)
            queued = .add(item)
            query = item
            secret = item["v_Data"]
        case .update(let match, let changes):
            guard let new = changes["v_Data"] else { return (request, nil) }
            query = match
            secret = new
        default:
            return (request, nil)
        }
        guard case .data(let given)? = query["u_CredRef"] else { return (queued, nil) }
        guard let owner else { throw AuthenticationContexts.unknown }
        guard let password = try contexts.credential(Array(given), for: owner) else { return (queued, nil) }
        let plain: SecretBytes
        switch secret {
        case .data(let bytes)?: plain = bytes
        case nil: plain = .empty
        default: return (queued, nil)  // not data: the store's parsing refuses it
        }
        guard plain.count <= KeychainLimits.maxSecretBytes - ApplicationPasswordSeal.overhead else {
            throw .param("the secret of an item with an application password is at most \(KeychainLimits.maxSecretBytes - ApplicationPasswordSeal.overhead) bytes")
        }
        let parameters = try store.withLock { (store) throws(KeychainError) -> Argon2Parameters in
            guard let handler = store.handler else { throw StoreExecutor.stoppingError }
            return handler.store.configuration.argon2
        }
        let sealed = try derivationGate.withLock { (_) throws(KeychainError) -> SecretBytes in
            SecretBytes(try ApplicationPasswordSeal.seal(plain, password: password, parameters: parameters))
        }
        return (queued, sealed)
    }

    private static func needsApplicationPassword(_ item: AttributeDictionary) -> Bool {
        guard let accc = item["accc"], let control = try? AccessControl(accc) else { return false }
        return AccessControl.needsApplicationPassword(control.flags)
    }

    /// An item's secret opened with the call's application password: refused during the
    /// item's delay before any Argon2id, and a wrong password counted. One derivation at a
    /// time (the derivation gate), so each is counted before the next check; never under the
    /// store's lock.
    func openSealed(_ sealed: SecretBytes, item: [UInt8], password: GuardedBytes) throws(KeychainError) -> SecretBytes {
        // Counted by the sealing's salt, not the item's persistent id: a delete and a restore
        // of a backup give the same sealed secret a new id, which would start the count again.
        let item = ApplicationPasswordSeal.sealingID(of: sealed) ?? item
        return try derivationGate.withLock { (_) throws(KeychainError) -> SecretBytes in
            try passwordThrottle.check(item, at: DaemonClock.system.wall())
            do throws(KeychainError) {
                let secret = try ApplicationPasswordSeal.open(sealed, password: password)
                passwordThrottle.succeeded(item)
                return secret
            } catch where error.status == .authFailed {
                throw passwordThrottle.failed(item, at: DaemonClock.system.wall())
            }
        }
    }

    /// Asks the person at the machine to type the keychain passcode for `caller`. Never with
    /// the store's lock held: only each typed passcode's check takes it, as `unlock` does.
    /// polkit asks first when `[prompt]` turns it on, outside the prompt gate (its dialog
    /// appears in the caller's own session, so one user's unanswered dialog must not hold up
    /// another's); where it cannot ask, pinentry does.
    /// `keychainPasscode`: the keychain passcode alone answers (devicePasscode), so polkit is
    /// not asked.
    func confirmPresence(for caller: Caller, label: String?, reason: String?, forContext: Bool = false,
                         purpose: String? = nil, keychainPasscode: Bool = false) throws(KeychainError) {
        var request = PromptRequest(executable: caller.executable, pid: caller.pid, label: label, reason: reason,
                                    forContext: forContext, purpose: purpose)
        if caller.executable == nil { request.hidden = HiddenProgram(of: caller) }
        var polkitWhy: String?
        if let polkit = polkitPrompt, !keychainPasscode {
            let outcome = caller.startTime.map { polkit.ask(request, subject: PolkitSubject(pid: caller.pid, startTime: $0, uid: caller.uid)) }
                ?? .unavailable("the calling process's start time could not be read when it connected")
            switch outcome {
            case .allowed: return
            case .refused(let error): throw error
            case .unavailable(let why):
                note("polkit cannot ask for \(caller): \(why)\(presencePrompt == nil ? "" : "; asking through pinentry")")
                polkitWhy = why
            }
        }
        guard let prompt = presencePrompt else {
            if let polkitWhy {
                throw KeychainError(.interactionNotAllowed, "polkit cannot ask (\(polkitWhy)), and [prompt] of keychaind.toml names no display or terminal for pinentry")
            }
            throw KeychainError(.interactionNotAllowed, "the item asks the person first, and keychaind has nowhere to ask: set a display or a terminal in [prompt] of keychaind.toml")
        }
        try promptGate.withLock { (_) throws(KeychainError) in
            try prompt.ask(request) { (passcode) throws(KeychainError) in try self.checkPasscode(passcode) }
        }
    }

    /// unlockPrompt (op 53): keychaind asks the person for the passcode on its own prompt,
    /// naming the program the kernel reports, and unlocks as `unlock` does. Never with the
    /// store's lock held while the prompt is shown. docs/protocol.md has the codes.
    private func unlockThroughPrompt(for caller: Caller, policy: AccessPolicy) -> Response {
        do throws(KeychainError) {
            // Any app of the policy may ask (the person decides); a uid it does not know may not
            // even show a dialog on this user's display.
            if policy.scope(for: caller).groups.isEmpty && !policy.isAdmin(caller) {
                throw KeychainError(.missingEntitlement, policy.refusal(for: caller))
            }
            guard try unlockPromptNeeded() else { return Response() }
            guard let prompt = presencePrompt else {
                throw KeychainError(.interactionNotAllowed, "the keychain is locked and keychaind has nowhere to ask for its passcode: set a display or a terminal in [prompt] of keychaind.toml, or run `keychain unlock`")
            }
            // The prompt names the program running now: a connection handed to a process that
            // then exec'd another program must not be shown under the first one's name.
            guard let executable = caller.executable, PeerProcess.executable(pid: caller.pid) == executable else {
                throw KeychainError(.missingEntitlement, "the process that opened this connection no longer runs the executable it connected with (or hides it); connect again")
            }
            let ticket = try unlockPrompts.withLock { (ledger) throws(KeychainError) in try ledger.admit(at: DaemonClock.system.monotonic()) }
            try promptGate.withLock { (_) throws(KeychainError) in
                if let shared = unlockPrompts.withLock({ $0.sharedFailure(since: ticket) }) { throw shared }
                // Unlocked by the prompt this caller waited for, or by anyone meanwhile.
                guard try unlockPromptNeeded() else { return }
                _ = try unlockPrompts.withLock { (ledger) throws(KeychainError) in try ledger.admit(at: DaemonClock.system.monotonic()) }
                // A wrong passcode that erased the keychain (erase_after_failures) ends the prompt:
                // there is no passcode left to ask for.
                var erased: KeychainError?
                do throws(KeychainError) {
                    try prompt.ask(.unlock(executable: executable, pid: caller.pid), timeout: Self.unlockPromptTimeout) {
                        (passcode) throws(KeychainError) in
                        do throws(KeychainError) {
                            try self.unlock(with: passcode, for: caller)
                        } catch where error.status == .authFailed && !self.hasPasscode() {
                            erased = error
                            throw KeychainError(.interactionNotAllowed, error.message)
                        }
                    }
                    unlockPrompts.withLock { $0.record(nil, at: DaemonClock.system.monotonic()) }
                } catch {
                    let failure = erased ?? (error.status == .io
                        ? KeychainError(.interactionNotAllowed, "the unlock prompt ended without an answer: \(error.message)")
                        : error)
                    unlockPrompts.withLock { $0.record(failure, at: DaemonClock.system.monotonic()) }
                    throw failure
                }
            }
            return Response()
        } catch {
            return Response(error: error)
        }
    }

    private func hasPasscode() -> Bool {
        store.withLock { $0.handler?.store.hasPasscode ?? false }
    }

    private func unlockPromptNeeded() throws(KeychainError) -> Bool {
        try store.withLock { (store) throws(KeychainError) -> Bool in
            guard let handler = store.handler else { throw StoreExecutor.stoppingError }
            return try handler.unlockPromptNeeded()
        }
    }

    /// One passcode typed at the unlock prompt: `unlock`'s steps (Argon2id outside the store's
    /// lock, one derivation at a time), counted and installed as `unlock`'s, lock-state
    /// notices included.
    private func unlock(with passcode: SecretBytes, for caller: Caller) throws(KeychainError) {
        try derivationGate.withLock { (_) throws(KeychainError) in
            let derivation = try store.withLock { (store) throws(KeychainError) -> Derivation? in
                guard let handler = store.handler else { throw StoreExecutor.stoppingError }
                return try handler.promptedUnlock(passcode)
            }
            guard let derivation else { return }  // the passcode was removed meanwhile: unlocked
            let outcome = Result { () throws(KeychainError) in try derivation.run() }
            if let error = locked({ $0.finish(derivation, outcome, from: caller) }).error { throw error }
        }
    }

    /// A passcode typed at the prompt, checked and counted as `unlock` checks one (the
    /// wrong-passcode delays, erase_after_failures), with Argon2id outside the store's lock.
    private func checkPasscode(_ passcode: SecretBytes) throws(KeychainError) {
        try derivationGate.withLock { (_) throws(KeychainError) in
            let snapshot = try store.withLock { (store) throws(KeychainError) -> KeybagSnapshot in
                guard let handler = store.handler else { throw StoreExecutor.stoppingError }
                return try handler.presenceCheckSnapshot()
            }
            let outcome = Result { () throws(KeychainError) in try snapshot.unlock(passcode: passcode) }
            try store.withLock { (store) throws(KeychainError) in
                guard let handler = store.handler else { throw StoreExecutor.stoppingError }
                try handler.countPresenceCheck(snapshot, outcome)
            }
        }
    }

    /// A read's lookups, the only parts of it that hold the store's lock (each counts as
    /// activity for the idle auto-lock).
    private struct ReadLookup: StoreLookup {
        let executor: StoreExecutor

        func lookup<T: Sendable>(_ body: (ItemStore) throws(KeychainError) -> T) throws(KeychainError) -> T {
            try executor.store.withLock { (store) throws(KeychainError) -> T in
                guard let handler = store.handler else { throw StoreExecutor.stoppingError }
                handler.noteActivity()
                return try body(handler.store)
            }
        }
    }

    /// A list answer cut into frames of about `SealedRows.pageBytes`: each frame but the last
    /// is sent as soon as it is full, the last is what remains pending.
    private struct AnswerFrames {
        var pending: [ItemResult] = []
        private var pendingBytes = 0

        mutating func add(_ result: ItemResult, emit: (Response) -> Bool) throws(KeychainError) {
            let size = WireCodec.encodedSize(result)
            if !pending.isEmpty && pendingBytes + size > SealedRows.pageBytes {
                guard emit(Response(result: .list(pending), continues: true)) else {
                    throw KeychainError(.io, "the client left in the middle of a long answer")
                }
                pending.removeAll(keepingCapacity: true)
                pendingBytes = 0
            }
            pending.append(result)
            pendingBytes += size
        }
    }

    /// A list answer cut into frames of about `SealedRows.pageBytes`: every frame but the last
    /// goes to `emit`, the last is returned.
    static func paged(_ response: Response, emit: (Response) -> Bool) -> Response {
        guard case .list(let items) = response.result else { return response }
        var frames = AnswerFrames()
        do throws(KeychainError) {
            for item in items { try frames.add(item, emit: emit) }
        } catch {
            return Response(error: error)
        }
        return Response(result: .list(frames.pending))
    }

    /// The store as the sync calls see it: each step takes the store's lock and releases it,
    /// so no PostgreSQL statement ever runs under it.
    struct LockedStore: SyncLocalStore, Sendable {
        let executor: StoreExecutor

        func withReplica<T: Sendable>(_ body: (ItemReplica) throws(KeychainError) -> T) throws(KeychainError) -> T {
            let (result, moved) = try executor.store.withLock { (store) throws(KeychainError) -> (T, Bool) in
                guard let handler = store.handler else { throw StoreExecutor.stoppingError }
                // A pull applies rows the store does not name one by one: subscribers re-read.
                let before = executor.notices.hasSubscribers ? try? handler.store.generation() : nil
                let result = try body(handler.store.replica)
                return (result, before != nil && (try? handler.store.generation()) != before)
            }
            if moved { executor.notices.publish([StoreExecutor.unnamedChange]) }
            return result
        }
    }

    private func locked(_ body: (RequestHandler) -> Response) -> Response {
        let (response, changed) = store.withLock { store -> (Response, [ChangeNotice]) in
            guard let handler = store.handler else { return (Self.stopping, []) }
            let response = body(handler)
            return (response, lockStateNotices(&store))
        }
        notices.publish(changed)
        return response
    }

    /// Releases the store once in-flight calls are done (its class keys are zeroed as the last
    /// references go). Later calls are told the daemon is stopping; the timer thread ends.
    func stop() {
        // First, so that no pass is cut by the store going away under it.
        sync.loop.stop()
        settings.withLock { $0.reader = nil }
        store.withLock { $0.handler = nil }
        timerWake.signal()
    }

    private static let stoppingError = KeychainError(.serviceNotAvailable, "keychaind is shutting down")
    private static let stopping = Response(error: stoppingError)

    /// The responses of a group of writes, in order, committed in one transaction.
    private static func runGrouped(_ group: [Write], _ handler: RequestHandler) -> ([Response], [ChangeNotice]) {
        var responses: [Response] = []
        var changed: [ChangeNotice] = []
        responses.reserveCapacity(group.count)
        do throws(KeychainError) {
            try handler.store.inOneTransaction {
                for write in group {
                    let response = handler.handle(write.request, from: write.caller, policy: write.policy, sealedSecret: write.sealedSecret,
                                                  allowedByPerson: write.allowedByPerson)
                    responses.append(response)
                    changed += notices(of: write, response, handler)
                }
            }
        } catch {
            // The commit failed: nothing in the group took effect, and every caller hears so.
            return (group.map { _ in Response(error: error) }, [])
        }
        return (responses, changed)
    }

    /// The Secret Service changes `write` made, as notices: none if it failed, since its
    /// savepoint undid them.
    private static func notices(of write: Write, _ response: Response, _ handler: RequestHandler) -> [ChangeNotice] {
        let changes = handler.store.takeSecretServiceChanges()
        guard response.status == 0 else { return [] }
        return changes.map { ChangeNotice(what: .item($0), writerPID: write.writerPID, writerUID: write.caller.uid) }
    }

    /// A lock-state notice if the state moved since the last one (called under the lock).
    private func lockStateNotices(_ store: inout Store) -> [ChangeNotice] {
        guard let handler = store.handler else { return [] }
        let now = handler.isLocked
        guard now != store.noticedLocked else { return [] }
        store.noticedLocked = now
        return [ChangeNotice(what: .lockState(locked: now), writerPID: 0, writerUID: 0)]
    }

    /// A change the store cannot name item by item (a restore, a sync pull).
    static let unnamedChange = ChangeNotice(what: .item(SecretServiceChange(kind: .unknown, persistentRef: [], service: "", accessGroup: "")),
                                            writerPID: 0, writerUID: 0)

    /// Records the one call a refused caller gets answered (denied calls are audited too).
    func audit(refused request: Request, from caller: Caller, response: Response, bridgePID: Int32? = nil) {
        let current = settings.withLock { $0 }
        current.audit?.record(request, caller: caller, app: current.policy.appID(for: caller), defaultGroup: nil,
                              response: response, bridgePID: bridgePID)
    }

    /// Why `policy` refuses `caller` outright (no access group, and not an admin), or nil when
    /// it may make some call.
    static func refusal(for caller: Caller, by policy: AccessPolicy) -> String? {
        // A bridge's rights come with each call, from the process it speaks for.
        guard policy.scope(for: caller).groups.isEmpty, !policy.isAdmin(caller), !policy.isBridge(caller.executable) else { return nil }
        return policy.refusal(for: caller)
    }
}
