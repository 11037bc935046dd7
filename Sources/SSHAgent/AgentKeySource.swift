import KeychainModel

/// Where the agent's keys live and are used: keychaind in the product (KeychainKeySource),
/// an in-memory store in the tests of the protocol. The agent never holds a private key
/// itself; it asks the source.
public protocol AgentKeySource: Sendable {
    /// The keys offered for SSH, with the comments ssh-add shows.
    func identities() throws(KeychainError) -> [AgentIdentity]
    /// Signs `data` as SSH defines for the key's type (Ed25519 over the data itself, ECDSA
    /// over its SHA-256). errSecItemNotFound when the source has no such SSH key. `reason`
    /// says who asked, for the prompt of a key that asks the person first.
    func sign(_ data: [UInt8], with key: SSHPublicKey, reason: String) throws(KeychainError) -> SSHSignature
    /// Stores a key ssh-add sent, so that it is offered from now on. errSecDuplicateItem when
    /// the source holds it already. `confirmEachUse` (ssh-add -c): each signature with it asks
    /// the person first.
    func add(_ key: SSHPrivateKey, comment: String, confirmEachUse: Bool) throws(KeychainError)
}
