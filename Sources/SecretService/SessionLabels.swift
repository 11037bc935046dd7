import KeychainModel

/// The session collection's Label as clients set it, per access group (the caller's first),
/// since one app's relabel is not another's. In memory, like the collection: gone when the
/// bridge exits.
struct SessionLabels {
    static let defaultLabel = "Session"
    /// Groups come from keychaind's config, not from clients, so this bound is never reached
    /// by a real configuration; it bounds the bridge's memory all the same.
    static let maxGroups = 256

    private var labels: [String: String] = [:]

    func label(for group: String?) -> String {
        group.flatMap { labels[$0] } ?? Self.defaultLabel
    }

    mutating func set(_ label: String, for group: String) throws(KeychainError) {
        guard labels[group] != nil || labels.count < Self.maxGroups else {
            throw KeychainError(.allocate, "the session collection has labels for \(Self.maxGroups) groups already")
        }
        labels[group] = label
    }
}
