/// What the person is asked before an update that would change items that ask first
/// (`SecItems.updateQuestion`): found under the store's lock, asked outside it, and answered
/// by persistent id, so that the update, under the lock again, changes only the items the
/// person allowed.
public struct UpdateQuestion: Sendable, Equatable {
    /// The persistent ids of the matches that ask first.
    public let items: Set<[UInt8]>
    /// The first such item's label, for the prompt.
    public let label: String?
    /// The caller's `u_OpPrompt`.
    public let reason: String?
    /// False under u_AuthUI Fail: errSecInteractionNotAllowed instead of asking.
    public let mayAsk: Bool
    /// One of them takes the keychain passcode alone (devicePasscode): polkit does not count.
    public var keychainPasscode = false
}
