import KeychainModel
import KeychainProtocol

/// An authentication context, as Apple's LAContext is to SecItem (issue 29): ask the person
/// once, then read several items that ask first without a prompt each, until the context is
/// invalidated, the keychain locks, its connection closes, or keychaind's maximum age
/// (`context_max_age_seconds`, 300 s by default) passes (docs/protocol.md, "Authentication
/// contexts").
///
/// keychaind binds a context to the connection that made it and to this process, so it lives
/// on one `KeychainConnection`: pass it to that connection's `copyMatching(_:context:)`, which
/// sends its reference as `u_CredRef` (what Apple's client makes of
/// kSecUseAuthenticationContext). A reconnection (a daemon restart, the idle timeout) ends it:
/// keychaind then answers errSecParam, and a new context is needed. The prompt counts against
/// the connection's `timeoutMs`, so a connection for a person to answer on wants a long one.
public final class AuthenticationContext: Sendable {
    /// The connection the context belongs to.
    public let connection: KeychainConnection
    /// The reference keychaind gave it (`u_CredRef`): worth nothing to another connection or
    /// process.
    public let reference: [UInt8]

    /// A new context on `connection`, not yet authenticated: the first read that asks while
    /// carrying it asks once, then it counts as authenticated (LAContext's evaluation on
    /// first use). errSecAllocate past keychaind's bound (16 per connection, 64 per uid).
    public init(connection: KeychainConnection) throws(KeychainError) {
        self.connection = connection
        reference = Array(try connection.perform(Calls.data(.contextCreate, "authentication context")))
    }

    /// Asks the person now, showing `reason` (LAContext.evaluatePolicy with a localized reason).
    /// errSecUserCanceled when they cancel, errSecAuthFailed after wrong passcodes,
    /// errSecInteractionNotAllowed when keychaind has nowhere to ask.
    public func authenticate(reason: String) throws(KeychainError) {
        try connection.perform(Calls.done(.contextAuthenticate(reference: reference, reason: reason)))
    }

    /// `authenticate(reason:)` for async code: the person's answer is waited for on a thread of
    /// its own.
    public func authenticate(reason: String) async throws(KeychainError) {
        try await connection.performOffThePool(Calls.done(.contextAuthenticate(reference: reference, reason: reason)))
    }

    /// Gives the context the application password (LAContext.setCredential(_:type:) with
    /// .applicationPassword): an item added or read with this context and the accc flag
    /// applicationPassword is sealed and opened with it. Empty takes it away. At most 1024
    /// bytes; keychaind keeps it in guarded memory until the context ends.
    public func setApplicationPassword(_ password: SecretBytes) throws(KeychainError) {
        try connection.perform(Calls.done(.contextSetCredential(reference: reference, credential: password)))
    }

    /// Ends the context (LAContext.invalidate): its reference is unknown to keychaind after.
    public func invalidate() throws(KeychainError) {
        try connection.perform(Calls.done(.contextInvalidate(reference: reference)))
    }

    /// `query` carrying this context (`u_CredRef`), for a call on `connection`.
    public func applied(to query: AttributeDictionary) -> AttributeDictionary {
        var query = query
        query["u_CredRef"] = .data(SecretBytes(reference))
        return query
    }
}

extension KeychainConnection {
    /// SecItemCopyMatching with kSecUseAuthenticationContext: an authenticated `context` spares
    /// the prompt of items that ask first. `context` must be this connection's (else
    /// errSecParam, before anything is sent).
    public func copyMatching(_ query: AttributeDictionary, context: AuthenticationContext) throws(KeychainError) -> QueryResult {
        guard context.connection === self else {
            throw KeychainError(.param, "an authentication context is used on the connection that made it")
        }
        return try copyMatching(context.applied(to: query))
    }

    /// `copyMatching(_:context:)` for async code.
    public func copyMatching(_ query: AttributeDictionary, context: AuthenticationContext) async throws(KeychainError) -> QueryResult {
        guard context.connection === self else {
            throw KeychainError(.param, "an authentication context is used on the connection that made it")
        }
        return try await copyMatching(context.applied(to: query))
    }
}

extension KeychainKey {
    /// This key on the context's connection, each use (sign, decrypt, agree) carrying
    /// `context` (Apple's kSecUseAuthenticationContext on a SecKey operation): once the context
    /// is authenticated, a key that asks first signs without a prompt for the context's life,
    /// and the first use's prompt authenticates a context that is not yet.
    public func using(_ context: AuthenticationContext) -> KeychainKey {
        var key = using(context.connection)
        key.context = context
        return key
    }
}
