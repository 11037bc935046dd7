import KeychainModel
import KeychainProtocol

/// One call of the client surface: the request keychaind gets and how its answer is read. The
/// blocking client (`KeychainConnection.perform`), the async one (`performOffThePool`) and the
/// bridge's (`DelegatedKeychain.perform`, which wraps the request in asCaller) all send these,
/// so each call's request and the shape its answer must have are written once, here, however
/// the request travels.
struct KeychainCall<Answer> {
    let request: Request
    let read: (Response) throws(KeychainError) -> Answer

    /// The same call made on behalf of `caller` (op 16): the answer keeps its shape.
    func onBehalf(of caller: CallerIdentity) -> KeychainCall<Answer> {
        KeychainCall(request: .asCaller(pid: caller.pid, startTime: caller.startTime, inner: request), read: read)
    }
}

// MARK: answer shapes

/// The one place where an answer's shape is checked: a successful answer of another shape than
/// its call expects is errSecDecode, naming the call.
extension Response {
    func attributes(of what: String) throws(KeychainError) -> AttributeDictionary {
        guard case .single(.attributes(let attributes)) = result else { throw Self.unexpected(what) }
        return attributes
    }

    func data(of what: String) throws(KeychainError) -> SecretBytes {
        guard case .single(.data(let data)) = result else { throw Self.unexpected(what) }
        return data
    }

    func list(of what: String) throws(KeychainError) -> [ItemResult] {
        guard case .list(let items) = result else { throw Self.unexpected(what) }
        return items
    }

    static func unexpected(_ what: String) -> KeychainError {
        KeychainError(.decode, "keychaind's \(what) answer has an unexpected shape")
    }
}

/// The calls the clients make, each as a KeychainCall. A namespace rather than static members of
/// KeychainCall: a member of a constrained extension cannot be named where the answer type is
/// still to be inferred, as it is in `perform(_:)`.
enum Calls {
    // MARK: answer shapes

    /// A call answered with what its return keys ask for (SecItemAdd, SecItemCopyMatching).
    static func returning(_ request: Request) -> KeychainCall<QueryResult> {
        KeychainCall(request: request) { $0.result }
    }

    /// A call whose success is its whole answer.
    static func done(_ request: Request) -> KeychainCall<Void> {
        KeychainCall(request: request) { _ in }
    }

    /// A call answered with one dictionary (status, key, sync, backup and restore calls).
    static func attributes(_ request: Request, _ what: String) -> KeychainCall<AttributeDictionary> {
        KeychainCall(request: request) { (response) throws(KeychainError) in try response.attributes(of: what) }
    }

    /// A call answered with bytes (a signature, a public key, a secret, a piece of a backup).
    static func data(_ request: Request, _ what: String) -> KeychainCall<SecretBytes> {
        KeychainCall(request: request) { (response) throws(KeychainError) in try response.data(of: what) }
    }

    /// A call answered with a list (sync devices, attribute searches).
    static func list(_ request: Request, _ what: String) -> KeychainCall<[ItemResult]> {
        KeychainCall(request: request) { (response) throws(KeychainError) in try response.list(of: what) }
    }

    // MARK: the SecItem and daemon calls every client makes

    static func add(_ attributes: AttributeDictionary) -> KeychainCall<QueryResult> { returning(.add(attributes)) }
    static func copyMatching(_ query: AttributeDictionary) -> KeychainCall<QueryResult> { returning(.copyMatching(query)) }
    static func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) -> KeychainCall<Void> {
        done(.update(query: query, changes: changes))
    }
    static func delete(_ query: AttributeDictionary) -> KeychainCall<Void> { done(.delete(query)) }
    static var status: KeychainCall<AttributeDictionary> { attributes(.status, "status") }
    static var lock: KeychainCall<Void> { done(.lock) }
    static func unlock(passcode: SecretBytes) -> KeychainCall<Void> { done(.unlock(passcode: passcode)) }
    static func setPasscode(_ new: SecretBytes) -> KeychainCall<Void> { done(.setPasscode(new: new)) }
    static func changePasscode(old: SecretBytes, new: SecretBytes) -> KeychainCall<Void> {
        done(.changePasscode(old: old, new: new))
    }
    static func removePasscode(current: SecretBytes) -> KeychainCall<Void> { done(.removePasscode(current: current)) }
}
