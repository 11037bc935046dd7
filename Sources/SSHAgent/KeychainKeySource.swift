import KeychainClient
import KeychainModel
import Synchronization

/// The agent's keys in keychaind: the Ed25519 and P-256 private keys whose application tag
/// is "ssh". Signing happens inside keychaind; a key ssh-add sends is imported there as a
/// non-extractable key and the agent keeps no copy.
public final class KeychainKeySource: AgentKeySource {
    private let connection: KeychainConnection
    /// The keys last listed, by public key, so a signature costs one call to keychaind rather
    /// than a search and a public-key read per SSH key.
    private let known = Mutex<[SSHPublicKey: KeychainKey]>([:])

    public init(connection: KeychainConnection) {
        self.connection = connection
    }

    public func identities() throws(KeychainError) -> [AgentIdentity] {
        try refresh().map { AgentIdentity(key: $0.0, comment: $0.1.label) }
    }

    public func sign(_ data: [UInt8], with key: SSHPublicKey, reason: String) throws(KeychainError) -> SSHSignature {
        if let cached = known.withLock({ $0[key] }) {
            do {
                return try sign(data, with: cached, as: key.type, reason: reason)
            } catch where error.status == .itemNotFound {
                // Deleted, or deleted and imported again under a new reference: look again.
            }
        }
        guard let current = try refresh().first(where: { $0.0 == key })?.1 else {
            throw KeychainError(.itemNotFound, "the keychain has no SSH key like the \(key.type.rawValue) key asked for")
        }
        return try sign(data, with: current, as: key.type, reason: reason)
    }

    private func sign(_ data: [UInt8], with key: KeychainKey, as type: SSHKeyType, reason: String) throws(KeychainError) -> SSHSignature {
        switch type {
        case .ed25519: .ed25519(try key.sign(data, algorithm: .ed25519, reason: reason))
        case .ecdsaP256: try SSHSignature.ecdsaP256(der: try key.sign(data, algorithm: .ecdsaMessageX962SHA256, reason: reason))
        }
    }

    /// A key added with `confirmEachUse` is stored with userPresence: keychaind asks the person
    /// at its prompt before each signature, for as long as the key is in the keychain (a key
    /// ssh-add sends is kept, as every key here, so its confirmation is kept with it).
    public func add(_ key: SSHPrivateKey, comment: String, confirmEachUse: Bool) throws(KeychainError) {
        let type: KeyType = key.publicKey.type == .ed25519 ? .ed25519 : .p256
        // keychaind's forms: Ed25519's 32-byte seed; P-256's X9.63 point then scalar (Apple's).
        let bytes = key.publicKey.type == .ed25519 ? key.privateBytes : Self.x963PrivateKey(point: key.publicKey.bytes, scalar: key.privateBytes)
        let label = comment.isEmpty ? "ssh \(key.publicKey.type.rawValue) key" : comment
        let confirmation = confirmEachUse ? AccessControl(protection: .whenUnlocked, flags: AccessControl.Flag.userPresence) : nil
        let stored: KeychainKey
        do {
            stored = try KeychainKey.importPrivateKey(bytes, type: type, label: label, accessibility: .whenUnlocked,
                                                      extractable: false, applicationTag: KeychainKey.sshTag,
                                                      accessControl: confirmation, connection: connection)
        } catch where error.status == .duplicateItem && confirmEachUse {
            // The key is there already; its constraint is sealed with it and cannot be added
            // now. Adding it back into view without the confirmation asked for would drop it.
            let present = try? KeychainKey.find(applicationTag: KeychainKey.sshTag, connection: connection)
                .first { $0.publicKey == key.publicKey.bytes }
            guard let present, case .string(let accc)? = present.attributes["accc"],
                  let control = try? AccessControl(.string(accc)), AccessControl.asksPerson(control.flags) else {
                throw KeychainError(.param, "the key is in the keychain already, without confirmation; delete it (keychain key delete) and add it again with -c")
            }
            throw error
        }
        // The public key ssh-add sent must be the private key's: a forged pair would list one
        // key and sign with another.
        guard stored.publicKey == key.publicKey.bytes else {
            try? stored.delete()
            throw KeychainError(.param, "the key's public half does not belong to its private half; not added")
        }
        known.withLock { $0[key.publicKey] = stored }
    }

    /// P-256's point ‖ scalar, assembled in wiped memory (an array concatenation would leave
    /// an unwiped copy of the scalar behind).
    static func x963PrivateKey(point: [UInt8], scalar: SecretBytes) -> SecretBytes {
        SecretBytes(count: point.count + scalar.count) { out in
            out.copyBytes(from: point)
            scalar.withUnsafeBytes { UnsafeMutableRawBufferPointer(rebasing: out[point.count...]).copyMemory(from: $0) }
        }
    }

    /// Lists the SSH keys again and remembers them. While keychaind is locked the keys cannot
    /// be read (their public halves are derived from the private ones): the keys last seen are
    /// offered, so that ssh asks for a signature and the refusal says to unlock, rather than
    /// ssh finding no key at all.
    private func refresh() throws(KeychainError) -> [(SSHPublicKey, KeychainKey)] {
        let found: [KeychainKey]
        do {
            found = try KeychainKey.find(applicationTag: KeychainKey.sshTag, connection: connection)
        } catch where error.status == .interactionNotAllowed {
            let last = known.withLock { $0.map { ($0.key, $0.value) } }
            if last.isEmpty { throw error }
            return last.sorted { $0.1.label < $1.1.label }
        }
        var list: [(SSHPublicKey, KeychainKey)] = []
        for key in found {
            let type: SSHKeyType
            switch key.type {
            case .ed25519: type = .ed25519
            case .p256: type = .ecdsaP256
            case .x25519: continue  // agrees, cannot sign
            }
            guard let publicKey = try? SSHPublicKey(type: type, bytes: key.publicKey) else { continue }
            list.append((publicKey, key))
        }
        known.withLock { $0 = Dictionary(list, uniquingKeysWith: { first, _ in first }) }
        return list
    }
}
