#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
import Synchronization

/// Which daemons a client talks to (root, the caller, or a uid named explicitly), so that
/// users of this library need not import the wire-protocol module.
public typealias ServerTrust = KeychainProtocol.ServerTrust

/// A connection to keychaind speaking the SecItem calls: the layer for code that already
/// thinks in SecItem dictionaries. Thread-safe (calls on one connection take turns; open more
/// connections for parallelism), and it reconnects after a daemon restart. Every call comes in
/// two forms: a blocking one, and an `async` one for async code, which waits on a thread of its
/// own rather than on the cooperative pool, and which a cancelled Task interrupts. Errors are
/// `KeychainError`: the daemon's OSStatus code, errSecServiceNotAvailable when keychaind cannot
/// be reached, or errSecUserCanceled when an async call's Task is cancelled.
public final class KeychainConnection: Sendable {
    public let socketPath: String
    /// Longest wait for an answer; keychaind answers at once even when locked, so hitting this
    /// means the daemon is wedged, not that it is waiting for a user.
    public let timeoutMs: Int32
    /// How long a read (a search, a status call) watches for its answer before sleeping; 0
    /// (the default): sleep at once. On a virtual machine, waking a halted CPU for the answer
    /// costs about as much as the daemon's work on a get, so a latency-bound caller (the bench)
    /// may turn this on; watching yields the CPU to anything else runnable, but a library must
    /// not spend its host's CPU unless asked to.
    public let busyPollMicroseconds: Int
    /// Which daemons this connection talks to; nil: root, the caller, and KEYCHAIN_TRUST_UID.
    public let trust: ServerTrust?
    private let socket = Mutex<Slot>(Slot())
    /// How many answers this connection has watched for rather than slept for: lets a test see
    /// which wait a read used (a failure of watching is otherwise invisible, as answers agree).
    private let watches = Atomic<Int>(0)
    var watchedReads: Int { watches.load(ordering: .relaxed) }

    /// The connection, once open. A struct of its own rather than `Link?`: the Mutex destroys
    /// its value through the value's type metadata, which for a generic type like Optional the
    /// runtime built from its mangled name when the connection was released, 8% of a whole
    /// `keychain get` (docs/performance.md); a plain struct's metadata is static.
    private struct Slot {
        var link: Link?
    }

    /// An open connection and the reader that buffers its input.
    private struct Link {
        let socket: UnixSocket
        let reader: FrameReader
        var reads = ReadPace()
    }

    /// `socketPath` nil means KEYCHAIN_SOCKET, else the default path (docs/protocol.md).
    /// The default `busyPollMicroseconds`.
    public static let defaultBusyPollMicroseconds = 0

    /// `trust` nil: daemons running as root or as the caller, or as the uid KEYCHAIN_TRUST_UID
    /// names; any other is refused before a byte is sent (errSecServiceNotAvailable).
    public init(socketPath: String? = nil, timeoutMs: Int32 = 60_000,
                busyPollMicroseconds: Int = KeychainConnection.defaultBusyPollMicroseconds,
                trust: ServerTrust? = nil) {
        self.trust = trust
        self.socketPath = DefaultPaths.clientSocketPath(socketPath)
        self.timeoutMs = timeoutMs
        self.busyPollMicroseconds = max(0, busyPollMicroseconds)
    }

    deinit {
        socket.withLock { $0.link?.socket.close() }
    }

    // MARK: SecItem calls

    /// SecItemAdd. Returns what the return keys ask for (`.none` without them).
    @discardableResult
    public func add(_ attributes: AttributeDictionary) throws(KeychainError) -> QueryResult {
        try AccessControl.checkRequest(attributes)
        return try perform(Calls.add(attributes))
    }

    /// SecItemCopyMatching.
    public func copyMatching(_ query: AttributeDictionary) throws(KeychainError) -> QueryResult { try perform(Calls.copyMatching(query)) }

    /// SecItemUpdate.
    public func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) throws(KeychainError) {
        try AccessControl.checkRequest(changes)
        try perform(Calls.update(query, changes))
    }

    /// SecItemDelete.
    public func delete(_ query: AttributeDictionary) throws(KeychainError) { try perform(Calls.delete(query)) }

    // MARK: daemon calls

    /// version, state (lockedSinceBoot / unlocked / locked), passcode (set or not), groups.
    public func status() throws(KeychainError) -> AttributeDictionary { try perform(Calls.status) }

    public func lock() throws(KeychainError) { try perform(Calls.lock) }
    // Passcodes and passwords are copied into wiped memory for the call; the caller's array
    // is the caller's to wipe.
    public func unlock(passcode: [UInt8]) throws(KeychainError) { try perform(Calls.unlock(passcode: SecretBytes(passcode))) }
    public func setPasscode(_ new: [UInt8]) throws(KeychainError) { try perform(Calls.setPasscode(SecretBytes(new))) }
    public func changePasscode(old: [UInt8], new: [UInt8]) throws(KeychainError) {
        try perform(Calls.changePasscode(old: SecretBytes(old), new: SecretBytes(new)))
    }
    public func removePasscode(current: [UInt8]) throws(KeychainError) { try perform(Calls.removePasscode(current: SecretBytes(current))) }
    /// Unlocks through keychaind's own passcode prompt (op 53): the person types the passcode
    /// there, so this process never holds it. Success at once when already unlocked;
    /// errSecUserCanceled when the person cancels, errSecAuthFailed after wrong passcodes,
    /// errSecInteractionNotAllowed when keychaind has nowhere to ask. A person takes time:
    /// give the connection a `timeoutMs` longer than keychaind's prompt (120 s).
    public func unlockPrompt() throws(KeychainError) { try perform(Calls.done(.unlockPrompt)) }

    // MARK: backup and restore (admin)

    /// What a backup holds: `items`, `excluded` (ThisDeviceOnly items left out) and `note`.
    public typealias BackupInfo = AttributeDictionary

    /// An encrypted backup of every item that may leave this device, sealed by the daemon
    /// under `password` (docs/backup-format.md). `progress` gets (bytes received, total).
    public func backup(password: [UInt8], progress: (Int, Int) -> Void = { _, _ in }) throws(KeychainError) -> (file: [UInt8], info: BackupInfo) {
        let info = try perform(Calls.attributes(.backupBegin(password: SecretBytes(password)), "backup"))
        guard case .int(let session)? = info["session"], case .int(let size)? = info["size"] else {
            throw Response.unexpected("backup")
        }
        var file: [UInt8] = []
        file.reserveCapacity(Int(size))
        while file.count < Int(size) {
            let chunk = try perform(Calls.data(.backupRead(session: UInt64(session), offset: UInt64(file.count)), "backup read"))
            guard !chunk.isEmpty else { throw KeychainError(.decode, "keychaind sent an empty piece of the backup") }
            file += chunk
            progress(file.count, Int(size))
        }
        return (file, info)
    }

    /// Restores a backup file made by `backup` (on this device or another) in one
    /// transaction. `onConflict`: `.fail` (nothing restored if any item exists already), `.skip`
    /// or "replace". Returns `restored`, `skipped`, `replaced`, `excluded` and `note`.
    public func restore(_ file: [UInt8], password: [UInt8], onConflict: ConflictPolicy = .fail,
                        progress: (Int, Int) -> Void = { _, _ in }) throws(KeychainError) -> AttributeDictionary {
        let begun = try perform(Calls.attributes(.restoreBegin(size: UInt64(file.count)), "restore"))
        guard case .int(let session)? = begun["session"] else { throw Response.unexpected("restore") }
        var offset = 0
        while offset < file.count {
            let end = min(file.count, offset + Request.chunkBytes)
            try perform(Calls.done(.restoreWrite(session: UInt64(session), offset: UInt64(offset),
                                                 bytes: Array(file[offset..<end]))))
            offset = end
            progress(offset, file.count)
        }
        return try perform(Calls.attributes(.restoreCommit(session: UInt64(session), password: SecretBytes(password),
                                                           onConflict: onConflict), "restore summary"))
    }

    // MARK: async calls

    // The same calls for async code. Each waits for keychaind on a thread of its own, so a slow
    // or wedged daemon holds none of the cooperative pool's threads. Cancelling the Task ends the
    // call at once with errSecUserCanceled (a call still waiting its turn on this connection ends
    // when its turn comes); a cancelled write may or may not have been carried out, as with any
    // lost connection.

    /// SecItemAdd, for async code.
    @discardableResult
    public func add(_ attributes: AttributeDictionary) async throws(KeychainError) -> QueryResult {
        try AccessControl.checkRequest(attributes)
        return try await performOffThePool(Calls.add(attributes))
    }

    /// SecItemCopyMatching, for async code.
    public func copyMatching(_ query: AttributeDictionary) async throws(KeychainError) -> QueryResult {
        try await performOffThePool(Calls.copyMatching(query))
    }

    /// SecItemUpdate, for async code.
    public func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) async throws(KeychainError) {
        try AccessControl.checkRequest(changes)
        try await performOffThePool(Calls.update(query, changes))
    }

    /// SecItemDelete, for async code.
    public func delete(_ query: AttributeDictionary) async throws(KeychainError) { try await performOffThePool(Calls.delete(query)) }

    /// `status()`, for async code.
    public func status() async throws(KeychainError) -> AttributeDictionary { try await performOffThePool(Calls.status) }

    public func lock() async throws(KeychainError) { try await performOffThePool(Calls.lock) }
    public func unlock(passcode: [UInt8]) async throws(KeychainError) {
        try await performOffThePool(Calls.unlock(passcode: SecretBytes(passcode)))
    }
    public func setPasscode(_ new: [UInt8]) async throws(KeychainError) {
        try await performOffThePool(Calls.setPasscode(SecretBytes(new)))
    }
    public func changePasscode(old: [UInt8], new: [UInt8]) async throws(KeychainError) {
        try await performOffThePool(Calls.changePasscode(old: SecretBytes(old), new: SecretBytes(new)))
    }
    public func removePasscode(current: [UInt8]) async throws(KeychainError) {
        try await performOffThePool(Calls.removePasscode(current: SecretBytes(current)))
    }

    // MARK: transport

    /// `call`, sent from this thread and waited for here.
    func perform<Answer>(_ call: KeychainCall<Answer>) throws(KeychainError) -> Answer {
        try call.read(try self.call(call.request))
    }

    /// `call`, waited for on a thread of its own (`callOffThePool`).
    func performOffThePool<Answer>(_ call: KeychainCall<Answer>) async throws(KeychainError) -> Answer {
        try call.read(try await callOffThePool(call.request))
    }

    /// `call` on a thread of its own, interrupted if the awaiting Task is cancelled.
    func callOffThePool(_ request: Request) async throws(KeychainError) -> Response {
        let interrupt = CallInterrupt()
        let result: Result<Response, KeychainError> = await withTaskCancellationHandler {
            do throws(KeychainError) {
                return .success(try await CallThread.run { () throws(KeychainError) in try self.call(request, interrupt: interrupt) })
            } catch {
                return .failure(error)
            }
        } onCancel: {
            interrupt.cancel()
        }
        return try result.get()
    }

    /// Sends one request and returns the daemon's successful response, or throws its error.
    /// Internal: the wire enum is the protocol's, not the client's API.
    func call(_ request: Request, interrupt: CallInterrupt? = nil) throws(KeychainError) -> Response {
        let frame = WireCodec.frame(request)
        // keychaind ends a connection that sends a longer frame: refused here instead, so one
        // oversized request (a Secret Service client's huge label) costs its caller an error,
        // not the connection every other call of this process shares.
        guard frame.count - 4 <= Frame.maxPayloadBytes else {
            throw KeychainError(.param, "the request is \(frame.count - 4) bytes; keychaind takes at most \(Frame.maxPayloadBytes)")
        }
        let response = try socket.withLock { (slot) throws(KeychainError) -> Response in
            try exchange(frame, current: &slot.link, retryable: Self.isSafeToRepeat(request),
                         watchNs: Self.isAnsweredAtOnce(request) ? UInt64(busyPollMicroseconds) * 1000 : 0,
                         interrupt: interrupt)
        }
        if let error = response.error { throw error }
        return response
    }

    /// Whether a request may be sent again when the connection broke after it was written:
    /// true for reads; writes are retried only when the failure came before sending.
    static func isSafeToRepeat(_ request: Request) -> Bool {
        switch request {
        case .copyMatching, .status, .lock, .attributeSearch, .attributeSecrets, .keyPublic, .keySign, .keyVerify, .keyAgree, .keyEncrypt, .keyDecrypt: true
        case .asCaller(_, _, let inner): isSafeToRepeat(inner)
        default: false
        }
    }

    /// Whether the daemon usually answers within microseconds: reads. A write waits for a
    /// durable commit (hundreds of microseconds), so watching for its answer would only burn CPU.
    static func isAnsweredAtOnce(_ request: Request) -> Bool {
        switch request {
        case .copyMatching, .status, .attributeSearch, .attributeSecrets, .keyPublic, .keySign, .keyVerify, .keyAgree, .keyEncrypt, .keyDecrypt: true
        case .asCaller(_, _, let inner): isAnsweredAtOnce(inner)
        default: false
        }
    }

    private func exchange(_ frame: SecretBytes, current: inout Link?, retryable: Bool, watchNs: UInt64,
                          interrupt: CallInterrupt?) throws(KeychainError) -> Response {
        var attempt = 0
        while true {
            attempt += 1
            if interrupt?.isCancelled == true { throw CallInterrupt.canceled }
            let reused = current != nil
            let link: Link
            if let c = current {
                link = c
            } else {
                let s = try connect()
                link = Link(socket: s, reader: FrameReader(s, capacity: 16 << 10, maxPayload: Frame.maxResponsePayloadBytes))
                current = link
            }
            let connection = link.socket
            var written = false
            do {
                try interrupt?.begin(connection)
                // Ends before the handlers below close the socket, so a late cancel cannot shut
                // down a descriptor number that has been reused.
                defer { interrupt?.end() }
                try connection.writeAll(frame)
                written = true
                let sent = watchNs > 0 ? MonotonicClock.nanoseconds() : 0
                var contended = false
                if watchNs > 0 && link.reads.shouldWatch(windowNs: watchNs) {
                    watches.add(1, ordering: .relaxed)
                    _ = link.reader.watch(forNs: watchNs) {
                        // A yield that gave the CPU away means other threads want it: stop
                        // watching and let them run.
                        let before = MonotonicClock.nanoseconds()
                        sched_yield()
                        contended = MonotonicClock.nanoseconds() &- before > ReadPace.contendedYieldNs
                        return !contended
                    }
                }
                guard let payload = try link.reader.next(idleTimeoutMs: timeoutMs, frameTimeoutMs: timeoutMs) else {
                    throw SocketFailure.closed
                }
                if watchNs > 0 { current?.reads.record(contended ? 4 * watchNs : MonotonicClock.nanoseconds() &- sent) }
                let first = try WireCodec.decodeResponse(payload)
                return first.continues ? try readPages(after: first, from: link.reader) : first
            } catch let failure as SocketFailure {
                connection.close()
                current = nil
                if interrupt?.isCancelled == true { throw CallInterrupt.canceled }
                // A connection kept from before may have died with a daemon restart: try a
                // fresh one once, if the request cannot have been half-done.
                if reused && attempt == 1 && (!written || retryable) && failure == .closed { continue }
                throw KeychainError(.serviceNotAvailable, "lost the connection to keychaind at \(socketPath): \(failure)")
            } catch let error as KeychainError {
                connection.close()
                current = nil
                throw error
            } catch {
                throw KeychainError(.internal, "\(error)")
            }
        }
    }

    /// A list answer in several frames (docs/protocol.md, "Long answers"): the pages' items in
    /// order, or the error a later page carries (then nothing of the answer is returned).
    private func readPages(after first: Response, from reader: FrameReader) throws -> Response {
        guard case .list(var items) = first.result else { throw KeychainError(.decode, "a continued answer is not a list") }
        var page = first
        while page.continues {
            guard let payload = try reader.next(idleTimeoutMs: timeoutMs, frameTimeoutMs: timeoutMs) else {
                throw SocketFailure.closed
            }
            page = try WireCodec.decodeResponse(payload)
            guard page.status == 0 else { return page }
            guard case .list(let more) = page.result else { throw KeychainError(.decode, "a continued answer is not a list") }
            items.append(contentsOf: more)
        }
        return Response(result: .list(items))
    }

    /// Change notices (op 47) on a connection of their own, to the same daemon.
    public func subscribeToChanges() throws(KeychainError) -> ChangeSubscription {
        try ChangeSubscription(try connect(), timeoutMs: timeoutMs)
    }

    /// A new connection to a daemon this client trusts; nothing is written before the check.
    private func connect() throws(KeychainError) -> UnixSocket {
        try DefaultPaths.checkClientSocketDirectory(of: socketPath)
        let accepted: ServerTrust
        if let trust { accepted = trust } else { accepted = try ServerTrust.resolve() }
        let connection: UnixSocket
        do {
            connection = try UnixSocket.connect(path: socketPath)
        } catch {
            throw KeychainError(.serviceNotAvailable, "cannot reach keychaind at \(socketPath) (\(error)); start it with `keychaind`, or set KEYCHAIN_SOCKET / --socket to where it listens")
        }
        do throws(KeychainError) {
            try accepted.check(connection, path: socketPath)
        } catch {
            connection.close()
            throw error
        }
        return connection
    }

    private func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { buf in
            guard let base = buf.baseAddress else { return }
            // memset_s is not in glibc; explicit_bzero is, and is not optimised away.
            explicit_bzero(base, buf.count)
        }
    }
}

/// Whether to watch for the answer to a read rather than sleep at once: only while the daemon
/// has been answering this connection's reads quickly (a smoothed answer time under twice the
/// watching window). With several busy clients on few CPUs, answers take longer and yields
/// while watching hand the CPU to other threads; both count as slow answers, so watching
/// stops by itself and leaves the CPU to the daemon. It resumes when answers are quick again.
struct ReadPace {
    /// A yield that took longer than this ran another thread.
    static let contendedYieldNs: UInt64 = 5_000
    private(set) var smoothedNs: UInt64 = 0

    func shouldWatch(windowNs: UInt64) -> Bool { smoothedNs < 2 * windowNs }

    /// Adds one answer time, weighted 1/8 against the history.
    mutating func record(_ ns: UInt64) {
        smoothedNs = smoothedNs - smoothedNs / 8 + ns / 8
    }
}
