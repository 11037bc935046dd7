#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainProtocol
import Synchronization

/// The agent's answers to requests, over a key source (docs/ssh-agent.md says what each
/// request does). Shared by every connection: what `ssh-add -d/-D` hid and the `ssh-add -x`
/// lock hold for the agent process, not for one connection, as with OpenSSH's agent.
public final class KeyAgent: Sendable {
    private let source: any AgentKeySource
    private let log: @Sendable (String) -> Void
    private let state = Mutex(State())
    /// Held through an unlock and its delay: guesses over many connections (a forwarded
    /// agent's channels) wait their turn, so the growing delay bounds guesses per second for
    /// the agent, as OpenSSH's single-threaded agent does, not per connection.
    private let unlockTurn = Mutex(())

    private struct State {
        /// Keys `ssh-add -d/-D` removed from the agent's view; still in the keychain.
        var hidden: Set<SSHPublicKey> = []
        /// Set by `ssh-add -x`: while set, nothing is listed or signed.
        var lockPassphrase: SecretBytes?
        var failedUnlocks = 0
    }

    /// `log` receives one line per refusal worth a person's attention (never key material).
    public init(source: any AgentKeySource, log: @escaping @Sendable (String) -> Void) {
        self.source = source
        self.log = log
    }

    /// The answer to one message (type byte and body); malformed input gets FAILURE.
    /// `peer`: the connection's process, named in the reason a prompt shows.
    public func answer(_ message: SecretBytes, from peer: PeerCredentials? = nil) -> AgentResponse {
        let request: AgentRequest
        do {
            request = try AgentRequest(message: message)
        } catch {
            log("refused a malformed request: \(error.message)")
            return .failure
        }
        return answer(request, from: peer)
    }

    public func answer(_ request: AgentRequest, from peer: PeerCredentials? = nil) -> AgentResponse {
        let locked = state.withLock { $0.lockPassphrase != nil }
        switch request {
        case .requestIdentities:
            // A locked agent lists nothing, as OpenSSH's does, so ssh moves on to other keys.
            if locked { return .identities([]) }
            guard let visible = visibleIdentities() else { return .failure }
            return .identities(visible)
        case .sign(let blob, let data, let flags):
            if locked { return refuse("a signature was asked while the agent is locked (ssh-add -X unlocks it)") }
            return sign(blob: blob, data: data, flags: flags, reason: Self.reason(for: peer))
        case .add(let key, let comment, let constraints):
            if locked { return refuse("an add was asked while the agent is locked") }
            return add(key, comment: comment, constraints: constraints)
        case .addUnsupported(let keyType):
            return refuse("cannot add a \(keyType) key: the keychain holds ssh-ed25519 and ecdsa-sha2-nistp256 keys")
        case .remove(let blob):
            if locked { return .failure }
            guard let key = try? SSHPublicKey(blob: blob),
                  let visible = visibleIdentities(), visible.contains(where: { $0.key == key }) else { return .failure }
            state.withLock { _ = $0.hidden.insert(key) }
            return .success
        case .removeAll:
            if locked { return .failure }
            guard let visible = visibleIdentities() else { return .failure }
            state.withLock { $0.hidden.formUnion(visible.map(\.key)) }
            return .success
        case .lock(let passphrase):
            return state.withLock { s in
                guard s.lockPassphrase == nil else { return .failure }
                s.lockPassphrase = passphrase
                return .success
            }
        case .unlock(let passphrase):
            return unlock(passphrase)
        case .extension:
            // session-bind@openssh.com included: ssh carries on without it (docs/ssh-agent.md).
            return .failure
        case .unsupported:
            return .failure
        }
    }

    private func refuse(_ reason: String) -> AgentResponse {
        log(reason)
        return .failure
    }

    private func visibleIdentities() -> [AgentIdentity]? {
        let all: [AgentIdentity]
        do {
            all = try source.identities()
        } catch {
            log("cannot list the keychain's SSH keys: \(error.message)\(Self.hint(for: error))")
            return nil
        }
        let hidden = state.withLock { $0.hidden }
        return all.filter { !hidden.contains($0.key) }
    }

    /// What a prompt for a key that asks first says of the signature: the agent cannot make
    /// ssh ask, so keychaind asks, and this names the process that asked the agent (by the
    /// executable the kernel reports for its pid, when the agent may read it).
    static func reason(for peer: PeerCredentials?) -> String {
        guard let peer else { return "an SSH signature through keychain ssh-agent" }
        let program = AgentServer.executable(of: peer.pid).map { "\($0) " } ?? ""
        return "an SSH signature for \(program)(pid \(peer.pid)) through keychain ssh-agent"
    }

    private func sign(blob: [UInt8], data: [UInt8], flags: UInt32, reason: String) -> AgentResponse {
        // Every flag defined so far asks for an RSA (or legacy DSA) signature form.
        guard flags == 0 else { return refuse("refused a signature with flags \(flags): they apply to RSA keys only") }
        let key: SSHPublicKey
        do {
            key = try SSHPublicKey(blob: blob)
        } catch {
            return refuse("refused a signature: \(error.message)")
        }
        if state.withLock({ $0.hidden.contains(key) }) { return .failure }
        do {
            return .signature(try source.sign(data, with: key, reason: reason))
        } catch {
            return refuse("did not sign with the \(key.type.rawValue) key: \(error.message)\(Self.hint(for: error))")
        }
    }

    private func add(_ key: SSHPrivateKey, comment: String, constraints: [AgentConstraint]) -> AgentResponse {
        guard constraints.allSatisfy({ $0 == .confirm }) else {
            // A lifetime or destination the agent cannot keep is refused, never dropped silently.
            return refuse("refused a key with constraints (ssh-add -t/-h): keychain keys have no lifetime or destination; add it without them (-c is kept)")
        }
        do {
            try source.add(key, comment: comment, confirmEachUse: !constraints.isEmpty)
        } catch where error.status == .duplicateItem {
            // A key hidden by ssh-add -d comes back into view, but only for a caller holding its
            // private half: the keychain checks the pair before it finds the duplicate. Its
            // public key alone (which a forwarded agent's far side may well know) is not enough.
            guard let all = try? source.identities(), all.contains(where: { $0.key == key.publicKey }) else {
                return refuse("did not add the \(key.publicKey.type.rawValue) key: \(error.message)")
            }
        } catch {
            return refuse("did not add the \(key.publicKey.type.rawValue) key: \(error.message)\(Self.hint(for: error))")
        }
        state.withLock { _ = $0.hidden.remove(key.publicKey) }
        return .success
    }

    private func unlock(_ passphrase: SecretBytes) -> AgentResponse {
        unlockTurn.withLock { _ in unlockInTurn(passphrase) }
    }

    private func unlockInTurn(_ passphrase: SecretBytes) -> AgentResponse {
        let failures: Int? = state.withLock { s in
            guard let expected = s.lockPassphrase else { return 0 }
            if expected == passphrase {
                s.lockPassphrase = nil
                s.failedUnlocks = 0
                return nil
            }
            s.failedUnlocks += 1
            return s.failedUnlocks
        }
        guard let failures else { return .success }
        if failures > 0 {
            // Guessing gets slower, as with OpenSSH's agent: 0.1 s more per miss, up to 10 s.
            usleep(UInt32(min(failures, 100)) * 100_000)
            log("refused an unlock: wrong passphrase")
        }
        return .failure
    }

    /// What the person can do about a keychain error, appended to the log line.
    static func hint(for error: KeychainError) -> String {
        switch error.status {
        case .interactionNotAllowed: "; the keychain is locked, or the key asks first and keychaind has nowhere to ask: run `keychain unlock` or set [prompt] in keychaind.toml, then try again"
        case .userCanceled: "; the person at keychaind's prompt said no"
        case .serviceNotAvailable: "; is keychaind running?"
        default: ""
        }
    }
}
