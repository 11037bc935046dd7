#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import Synchronization

/// The connection a context belongs to: a number keychaind gives each connection (a
/// descriptor number is reused as soon as it is closed), with the peer the kernel named.
struct ContextOwner: Sendable, Equatable {
    let connection: UInt64
    let uid: UInt32
    let pid: Int32
}

/// The process that made a context, as /proc shows it: a pid names another process once this
/// one has exited, its start time (clock ticks since boot) does not, and an exec changes the
/// executable. Read at contextCreate and again at every use.
struct ContextProcess: Sendable, Equatable {
    let startTime: UInt64
    let executable: String?

    /// nil when the process has exited (or is a zombie).
    init?(pid: Int32) {
        guard let stat = ProcFile.read("/proc/\(pid)/stat", in: AT_FDCWD),
              let parsed = DelegatedProcess.parseStat(stat), parsed.state != UInt8(ascii: "Z") else { return nil }
        startTime = parsed.startTime
        executable = PeerProcess.executable(pid: pid)
    }
}

/// Authentication contexts (LAContext; ops 49, 50, 52 and `u_CredRef`, issue 29): what lets a
/// caller be asked once for several reads. Each is bound to the connection that made it and
/// to that connection's process (pid, start time and executable, checked at every use), so a
/// reference that leaks to another connection, another process or another program opens
/// nothing. A context is authenticated by a prompt (contextAuthenticate, or the first read
/// that asks while carrying it) and stays so until the maximum age passes, a lock event moves
/// the handler's authentication epoch, it is invalidated, or its connection closes. Bounded
/// per connection and per uid, so that a flood of contextCreate grows nothing without bound.
final class AuthenticationContexts: Sendable {
    static let perConnection = 16
    static let perUID = 64
    static let referenceBytes = 32

    /// When a prompt said yes, and the handler's authentication epoch then.
    struct Authentication: Sendable, Equatable {
        let at: Double
        let epoch: UInt64
    }

    private struct Context {
        let owner: ContextOwner
        let process: ContextProcess
        var authentication: Authentication?
        /// The application password (op 51), in guarded memory: zeroed when the context
        /// goes (its last reference is here, or a read using it for the moment).
        var credential: GuardedBytes?
    }

    private struct State {
        var contexts: [[UInt8]: Context] = [:]
        var perConnection: [UInt64: Int] = [:]
        var perUID: [UInt32: Int] = [:]

        mutating func remove(_ reference: [UInt8]) {
            guard let context = contexts.removeValue(forKey: reference) else { return }
            Self.decrement(&perConnection, context.owner.connection)
            Self.decrement(&perUID, context.owner.uid)
        }

        static func decrement<K: Hashable>(_ counts: inout [K: Int], _ key: K) {
            let left = (counts[key] ?? 1) - 1
            counts[key] = left > 0 ? left : nil
        }
    }

    /// A PthreadMutex, as every lock on the request path (PthreadMutex.swift says why).
    private let state = PthreadMutex(State())
    /// How many contexts exist, for the questions asked on every request: with none (nearly
    /// always) they are answered without the lock, which eight busy clients' requests
    /// otherwise all queue on (docs/performance.md).
    private let live = Atomic<Int>(0)
    private let connections = Atomic<UInt64>(0)
    /// Seconds an authentication spares its context the prompt.
    let maxAge: Double

    init(maxAge: Double) {
        self.maxAge = maxAge
    }

    /// One message for every reference this connection may not use, so that it cannot tell
    /// another connection's reference from a made-up one.
    static let unknown = KeychainError(.param, "u_CredRef names no authentication context of this connection and process; make one with contextCreate on the connection that uses it")

    /// `body` on the state, for a change that may add or remove contexts: `live` follows the
    /// table inside the same lock, so a reader that sees 0 has no context to miss.
    private func changing<R, E: Error>(_ body: (inout State) throws(E) -> R) throws(E) -> R {
        try state.withLock { (state) throws(E) -> R in
            defer { live.store(state.contexts.count, ordering: .releasing) }
            return try body(&state)
        }
    }

    /// A number for a new connection.
    func openConnection() -> UInt64 { connections.add(1, ordering: .relaxed).newValue }

    /// Whether `connection` holds a context: the server then keeps it open past the idle
    /// timeout, as an app keeps its LAContext for as long as it likes (perUID bounds how many
    /// connections a uid keeps open this way).
    func holdsAny(_ connection: UInt64) -> Bool {
        live.load(ordering: .acquiring) > 0 && state.withLock { $0.perConnection[connection] != nil }
    }

    /// Its contexts go with it.
    func connectionClosed(_ connection: UInt64) {
        changing { state in
            guard state.perConnection[connection] != nil else { return }
            for (reference, context) in state.contexts where context.owner.connection == connection { state.remove(reference) }
        }
    }

    /// A new, unauthenticated context of `owner`: its reference (random, 32 bytes).
    func create(for owner: ContextOwner) throws(KeychainError) -> [UInt8] {
        guard let process = ContextProcess(pid: owner.pid) else {
            throw KeychainError(.param, "the process that opened this connection (pid \(owner.pid)) has exited: an authentication context belongs to it")
        }
        let reference = Sodium.randomBytes(Self.referenceBytes)
        try changing { (state) throws(KeychainError) in
            guard state.perConnection[owner.connection, default: 0] < Self.perConnection else {
                throw KeychainError(.allocate, "this connection holds \(Self.perConnection) authentication contexts, the most it may; invalidate one first")
            }
            guard state.perUID[owner.uid, default: 0] < Self.perUID else {
                throw KeychainError(.allocate, "uid \(owner.uid) holds \(Self.perUID) authentication contexts, the most one uid may; invalidate some first")
            }
            state.contexts[reference] = Context(owner: owner, process: process, authentication: nil)
            state.perConnection[owner.connection, default: 0] += 1
            state.perUID[owner.uid, default: 0] += 1
        }
        return reference
    }

    /// The authentication of `reference` for `owner` (nil: not authenticated), after checking
    /// that it is this connection's and that the process that made it still runs its program;
    /// errSecParam otherwise (a context whose process is gone is dropped).
    func authentication(_ reference: [UInt8], for owner: ContextOwner) throws(KeychainError) -> Authentication? {
        guard let context = state.withLock({ $0.contexts[reference] }), context.owner == owner else { throw Self.unknown }
        // Outside the lock: a read of /proc.
        guard ContextProcess(pid: owner.pid) == context.process else {
            changing { $0.remove(reference) }
            throw Self.unknown
        }
        return context.authentication
    }

    /// Gives `reference` the application password (nil takes it away). Checked as `authentication`.
    func setCredential(_ credential: GuardedBytes?, _ reference: [UInt8], for owner: ContextOwner) throws(KeychainError) {
        _ = try authentication(reference, for: owner)
        try state.withLock { (state) throws(KeychainError) in
            guard state.contexts[reference]?.owner == owner else { throw Self.unknown }
            state.contexts[reference]?.credential = credential
        }
    }

    /// The application password `reference` holds, if any. Checked as `authentication`.
    func credential(_ reference: [UInt8], for owner: ContextOwner) throws(KeychainError) -> GuardedBytes? {
        _ = try authentication(reference, for: owner)
        return state.withLock { $0.contexts[reference]?.credential }
    }

    /// Whether `reference` spares the prompt now: authenticated within the maximum age and
    /// with no lock event since (`epoch`, the handler's now). errSecParam as `authentication`.
    func isAuthenticated(_ reference: [UInt8], for owner: ContextOwner, now: Double, epoch: UInt64) throws(KeychainError) -> Bool {
        guard let given = try authentication(reference, for: owner) else { return false }
        return given.epoch == epoch && now - given.at < maxAge
    }

    /// The person said yes for `reference` (asked at `epoch`). A context invalidated meanwhile
    /// stays gone.
    func authenticated(_ reference: [UInt8], for owner: ContextOwner, _ authentication: Authentication) {
        state.withLock { state in
            guard state.contexts[reference]?.owner == owner else { return }
            state.contexts[reference]?.authentication = authentication
        }
    }

    /// Ends `reference` (errSecParam as `authentication` when it is not this connection's).
    func invalidate(_ reference: [UInt8], for owner: ContextOwner) throws(KeychainError) {
        try changing { (state) throws(KeychainError) in
            guard state.contexts[reference]?.owner == owner else { throw Self.unknown }
            state.remove(reference)
        }
    }

    /// The contexts `connection` holds (status `contexts`).
    func count(connection: UInt64) -> Int {
        guard live.load(ordering: .acquiring) > 0 else { return 0 }
        return state.withLock { $0.perConnection[connection] ?? 0 }
    }
}
