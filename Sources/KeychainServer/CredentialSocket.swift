#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
import KeychainStore

/// What a unit's `LoadCredential=ID:SOCKET` asks for. systemd connects to the socket with its
/// end bound to the abstract address "\0RANDOM/unit/UNIT/ID" and reads to EOF (systemd.exec(5),
/// "Credentials"); the address is the only place the request is written.
struct CredentialRequest: Sendable, Equatable {
    let unit: String
    let id: String

    /// The request in the peer's address (getpeername's sun_path, `bytes` as long as the
    /// address length says); nil for anything else, a path or an address of another shape.
    init?(abstractAddress bytes: [UInt8]) {
        guard bytes.first == 0, bytes.count > 1,
              let text = String(validating: bytes.dropFirst(), as: UTF8.self) else { return nil }
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, !parts[0].isEmpty, parts[1] == "unit",
              Self.isUnitName(parts[2]), Self.isCredentialID(parts[3]) else { return nil }
        unit = String(parts[2])
        id = String(parts[3])
    }

    init(unit: String, id: String) {
        self.unit = unit
        self.id = id
    }

    /// systemd's unit name characters, and a type suffix.
    static func isUnitName(_ name: Substring) -> Bool {
        guard (2...255).contains(name.utf8.count), let dot = name.lastIndex(of: "."), dot != name.startIndex else { return false }
        return name.utf8.allSatisfy { c in
            (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || ":_.\\@-".utf8.contains(c)
        }
    }

    /// A credential name as systemd takes it: a file name, printable.
    static func isCredentialID(_ id: Substring) -> Bool {
        (1...255).contains(id.utf8.count) && id != "." && id != ".." && id.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F }
    }

    /// The generic password that holds it: service "systemd-credential:UNIT", account ID
    /// (docs/credentials.md).
    var service: String { Self.servicePrefix + unit }
    static let servicePrefix = "systemd-credential:"

    var query: AttributeDictionary {
        ["class": .string("genp"), "svce": .string(service), "acct": .string(id),
         "r_Data": .bool(true), "m_Limit": .string("m_LimitOne")]
    }
}

/// Whether a peer of the credential socket is the unit its address names, and which access
/// groups its credential may come from. Any process can bind any abstract address, so the
/// address is believed only of the unit's own set-up process: for a system unit, uid 0 in
/// that unit's cgroup; for a user unit, its user's uid in that unit's cgroup below
/// user@UID.service, with no more than that uid could read itself.
enum CredentialPeer {
    static func scope(for request: CredentialRequest, uid: UInt32, unit: SystemdUnit?,
                      policy: AccessPolicy) -> Result<AccessScope, KeychainError> {
        switch unit {
        case .system(let name)? where uid == 0 && name == request.unit:
            // The unit's own rules, whatever uid it runs as: the set-up process is root.
            guard let app = policy.applications.first(where: { $0.units.contains(name) }) else {
                return .failure(KeychainError(.missingEntitlement, "no [[app]] names the unit in its units"))
            }
            return .success(AccessScope(groups: app.groups))
        case .user(let owner, let name)? where uid == owner && uid != 0 && name == request.unit:
            let scope = policy.scope(for: Caller(pid: 0, uid: uid, gid: 0, executable: nil, unit: unit))
            guard !scope.groups.isEmpty else {
                return .failure(KeychainError(.missingEntitlement, "the policy gives the user unit's uid no access group"))
            }
            return .success(scope)
        default:
            return .failure(KeychainError(.authFailed, "the peer is not that unit's set-up process (uid \(uid), unit \(unit.map { "\($0)" } ?? "none"))"))
        }
    }
}

/// Serves `LoadCredential=` requests on their own socket, one connection at a time: each is
/// answered at once from the store, never read from. systemd reads to EOF, and takes an EOF
/// with no byte for an empty credential, so a refusal, a missing item or a locked class cannot
/// be a plain close; nor can it be a reset, which an AF_UNIX stream gives its peer only when
/// the closing end holds unread bytes, and systemd sends none. A refusal is instead an answer
/// one byte over systemd's limit for a credential (CREDENTIAL_SIZE_MAX, 1 MiB): systemd 252
/// fails the read (E2BIG) and the unit does not start (docs/credentials.md).
final class CredentialSocket: Sendable {
    private let listener: UnixSocket
    private let executor: StoreExecutor
    private let log: @Sendable (_ warning: Bool, _ line: String) -> Void

    init(listener: UnixSocket, executor: StoreExecutor, log: @escaping @Sendable (_ warning: Bool, _ line: String) -> Void) {
        self.listener = listener
        self.executor = executor
        self.log = log
    }

    func close() { listener.close() }

    /// Accepts and answers until `wake` becomes readable.
    func run(wake: Int32) {
        var made: ConnectionWaiter?
        while made == nil {
            do {
                made = try ConnectionWaiter(listener: listener, wake: wake)
            } catch {
                log(true, "credential socket: cannot wait for connections: \(error)")
                // Waits a moment without spinning, unless the daemon is stopping.
                var stop = pollfd(fd: wake, events: Int16(POLLIN), revents: 0)
                if poll(&stop, 1, 50) > 0 { return }
            }
        }
        guard let waiter = made else { return }
        while true {
            let accepted: UnixSocket?
            do {
                accepted = try listener.accept(waitingIn: waiter)
            } catch {
                log(true, "credential socket: accept failed: \(error)")
                usleep(50_000)
                continue
            }
            guard let connection = accepted else { return }
            answer(connection)
        }
    }

    private func answer(_ connection: UnixSocket) {
        defer { connection.close() }
        // Bounds how long one peer that does not read holds this socket's one thread.
        _ = try? connection.withDescriptor { fd in
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
        guard let peer = PeerCredentials.of(connection) else { return refuse(connection) }
        let described = "uid \(peer.uid) pid \(peer.pid)"
        guard let request = Self.request(of: connection) else {
            log(true, "credential socket: refused \(described): its address names no unit and credential")
            return refuse(connection)
        }
        let what = "credential \(LogText.escape(request.id)) of \(LogText.escape(request.unit))"
        // The cgroup through the /proc/PID descriptor, which cannot come to name another process.
        let unit = PeerProcess(pid: peer.pid, uid: peer.uid)?.unit()
        do throws(KeychainError) {
            let scope = try CredentialPeer.scope(for: request, uid: peer.uid, unit: unit, policy: executor.policy).get()
            let secret = try executor.secret(request.query, scope: scope)
            guard !secret.isEmpty else { throw KeychainError(.itemNotFound, "the item's secret is empty") }
            guard secret.count <= Self.sizeLimit else { throw KeychainError(.param, "the item's secret is over systemd's 1 MiB limit") }
            do {
                try connection.writeAll(secret)
            } catch {
                log(true, "credential socket: \(what) not delivered to \(described): \(error)")
                return
            }
            log(false, "credential socket: served \(what) to \(described)")
        } catch {
            log(true, "credential socket: refused \(what) to \(described): \(error); the unit fails to start")
            refuse(connection)
        }
    }

    /// The request in the address the peer bound its end to.
    static func request(of connection: UnixSocket) -> CredentialRequest? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let rc = (try? connection.withDescriptor { fd in
            withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
            }
        }) ?? -1
        let pathOffset = MemoryLayout<sa_family_t>.size
        guard rc == 0, Int(length) > pathOffset else { return nil }
        let bytes = withUnsafeBytes(of: address.sun_path) { Array($0.prefix(Int(length) - pathOffset)) }
        return CredentialRequest(abstractAddress: bytes)
    }

    /// systemd's CREDENTIAL_SIZE_MAX: a credential longer than this fails the unit's start.
    static let sizeLimit = 1 << 20

    /// What fails the read: one byte more than systemd takes (zeros, nothing of any secret).
    static let refusal = [UInt8](repeating: 0, count: sizeLimit + 1)

    private func refuse(_ connection: UnixSocket) {
        _ = try? connection.writeAll(Self.refusal)
    }
}

/// Op 46, credentialLookup: what the credential socket would answer a unit's set-up process,
/// for an admin checking a unit's lines (`keychain credential check`): the item's attributes,
/// never its secret, or the error that would fail the unit.
struct CredentialLookup {
    let request: CredentialRequest
    /// The user manager's uid for a user unit; nil for a system unit.
    let uid: UInt32?

    init(_ dict: AttributeDictionary) throws(KeychainError) {
        guard case .string(let unit)? = dict["unit"], CredentialRequest.isUnitName(Substring(unit)) else {
            throw KeychainError(.param, "credentialLookup needs \"unit\", a unit name such as web.service")
        }
        guard case .string(let id)? = dict["id"], CredentialRequest.isCredentialID(Substring(id)) else {
            throw KeychainError(.param, "credentialLookup needs \"id\", a credential name (a file name)")
        }
        switch dict["uid"] {
        case nil: uid = nil
        case .int(let n)? where n > 0 && n < Int64(UInt32.max): uid = UInt32(n)
        default: throw KeychainError(.param, "\"uid\" must be the user manager's uid, not 0")
        }
        let known: Set<String> = ["unit", "id", "uid"]
        if let other = dict.keys.first(where: { !known.contains($0) }) {
            throw KeychainError(.param, "credentialLookup takes unit, id and uid, not \(LogText.escape(other))")
        }
        request = CredentialRequest(unit: unit, id: id)
    }

    func run(in store: ItemStore, policy: AccessPolicy) throws(KeychainError) -> AttributeDictionary {
        let unit: SystemdUnit = uid.map { .user(uid: $0, request.unit) } ?? .system(request.unit)
        let scope = try CredentialPeer.scope(for: request, uid: uid ?? 0, unit: unit, policy: policy).get()
        var query = request.query
        query["r_Attributes"] = .bool(true)
        // The secret is read as the socket reads it, so a locked class shows here too.
        guard case .single(.attributes(var found)) = try store.items.copyMatching(query, scope: scope) else {
            throw KeychainError(.itemNotFound, "no item")
        }
        guard case .data(let secret)? = found["v_Data"], !secret.isEmpty else {
            throw KeychainError(.itemNotFound, "the item's secret is empty")
        }
        found["v_Data"] = nil
        found["size"] = .int(Int64(secret.count))
        return found
    }
}
