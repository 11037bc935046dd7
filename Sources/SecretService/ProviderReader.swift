#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainModel

/// One item as the provider we import from holds it.
struct ProviderItem: Sendable {
    let path: String
    let label: String
    let attributes: [String: String]
    let contentType: String
    let secret: SecretBytes
    /// Unix seconds (the Secret Service's Created and Modified).
    let created: UInt64
    let modified: UInt64
}

/// One collection of the provider, its items read, or why they could not be.
struct ProviderCollection: Sendable {
    let path: String
    let label: String
    var items: [ProviderItem] = []
    /// Items that could not be read: path and why.
    var unreadable: [(path: String, reason: String)] = []
    /// Set when the collection as a whole could not be read (locked and not unlocked).
    var failure: String?
}

/// Reads every collection and item of the program that owns org.freedesktop.secrets now
/// (gnome-keyring, KWallet, KeePassXC), as any Secret Service client does: a plain session
/// (the secrets cross this user's own bus, as they would to any client), Unlock through the
/// provider's own prompt where a collection is locked, then one GetSecrets per collection.
struct ProviderReader {
    let bus: BusConnection
    /// The provider's unique name, so that every call reaches the same program even if
    /// another takes the well-known name meanwhile.
    let provider: String
    /// How long a person has to answer the provider's unlock prompt.
    var promptSeconds: Double = 300

    private static let service = "org.freedesktop.Secret.Service"
    private static let properties = "org.freedesktop.DBus.Properties"
    private static let root = "/org/freedesktop/secrets"

    init(bus: BusConnection) throws(KeychainError) {
        self.bus = bus
        guard let owner = try? bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                                        member: "GetNameOwner", arguments: [.string(SecretServiceBridge.busName)]).readString() else {
            throw KeychainError(.serviceNotAvailable, "no program owns \(SecretServiceBridge.busName) on the session bus: start the provider to import from (gnome-keyring, KWallet, KeePassXC) first")
        }
        provider = owner
    }

    /// Every collection but the session collection (gnome-keyring's /collection/session),
    /// which holds only what its programs put there for the provider's lifetime.
    func read() throws(KeychainError) -> [ProviderCollection] {
        let session = try call(Self.root, Self.service, "OpenSession", [.string("plain"), .variant(.string(""))])
        _ = try session.readValue()
        let sessionPath = try session.readObjectPath()
        defer { _ = try? call(sessionPath, "org.freedesktop.Secret.Session", "Close") }
        guard case .array(_, let paths) = try property(Self.root, Self.service, "Collections") else {
            throw KeychainError(.decode, "the provider's Collections is not a list of paths")
        }
        var collections: [ProviderCollection] = []
        for case .objectPath(let path) in paths where !path.hasSuffix("/collection/session") {
            collections.append(readCollection(path, session: sessionPath))
        }
        return collections
    }

    private func readCollection(_ path: String, session: String) -> ProviderCollection {
        let interface = "org.freedesktop.Secret.Collection"
        var collection = ProviderCollection(path: path, label: (try? property(path, interface, "Label"))?.stringValue ?? "")
        do throws(KeychainError) {
            if (try property(path, interface, "Locked")).boolValue == true {
                try unlock(path)
            }
            guard case .array(_, let listed) = try property(path, interface, "Items") else {
                throw KeychainError(.decode, "its Items is not a list of paths")
            }
            let itemPaths = listed.compactMap(\.objectPathValue)
            let secrets = try self.secrets(itemPaths, session: session)
            for itemPath in itemPaths {
                guard let secret = secrets[itemPath] else {
                    collection.unreadable.append((itemPath, "the provider gave no secret for it (still locked?)"))
                    continue
                }
                do throws(KeychainError) {
                    collection.items.append(try item(itemPath, secret: secret))
                } catch {
                    collection.unreadable.append((itemPath, error.message))
                }
            }
        } catch {
            collection.failure = error.message
        }
        return collection
    }

    private func item(_ path: String, secret: (contentType: String, value: SecretBytes)) throws(KeychainError) -> ProviderItem {
        let reply = try call(path, Self.properties, "GetAll", [.string("org.freedesktop.Secret.Item")])
        guard let all = try reply.readValue().variantDictionaryValue else { throw KeychainError(.decode, "its properties are not a{sv}") }
        guard let attributes = all["Attributes"]?.stringDictionaryValue else { throw KeychainError(.decode, "its Attributes are not a{ss}") }
        return ProviderItem(path: path, label: all["Label"]?.stringValue ?? "", attributes: attributes,
                            contentType: secret.contentType, secret: secret.value,
                            created: Self.seconds(all["Created"]), modified: Self.seconds(all["Modified"]))
    }

    /// GetSecrets: path → (content type, secret). Read member by member so that each secret
    /// goes straight from the reply's buffer (wiped there) into wiped memory.
    private func secrets(_ paths: [String], session: String) throws(KeychainError) -> [String: (contentType: String, value: SecretBytes)] {
        guard !paths.isEmpty else { return [:] }
        let reply = try call(Self.root, Self.service, "GetSecrets", [.array(element: "o", paths.map { .objectPath($0) }), .objectPath(session)])
        reply.markSensitive()
        var found: [String: (contentType: String, value: SecretBytes)] = [:]
        try reply.enterContainer(.array, signature: "{o(oayays)}")
        while !reply.atEnd {
            try reply.enterContainer(.dictionaryEntry, signature: "o(oayays)")
            let path = try reply.readObjectPath()
            try reply.enterContainer(.structure, signature: "oayays")
            _ = try reply.readObjectPath()
            _ = try reply.readBytes()  // a plain session's parameters: empty
            let value = try reply.readSecretBytes()
            let contentType = try reply.readString()
            try reply.exitContainer()
            try reply.exitContainer()
            found[path] = (contentType, value)
        }
        try reply.exitContainer()
        return found
    }

    /// Service.Unlock, and the provider's prompt if it asks for one, waited for.
    private func unlock(_ path: String) throws(KeychainError) {
        let reply = try call(Self.root, Self.service, "Unlock", [.array(element: "o", [.objectPath(path)])])
        _ = try reply.readValue()
        let prompt = try reply.readObjectPath()
        guard prompt != "/" else { return }
        var outcome: Bool?
        try bus.onSignal(sender: provider, path: prompt, interface: "org.freedesktop.Secret.Prompt", member: "Completed") { signal in
            outcome = (try? signal.readBool()).map { !$0 }
        }
        _ = try call(prompt, "org.freedesktop.Secret.Prompt", "Prompt", [.string("")])
        let deadline = Date().addingTimeInterval(promptSeconds)
        while outcome == nil && Date() < deadline {
            try bus.processPending()
            if outcome == nil { try bus.waitForMessages(timeoutMicroseconds: 1_000_000) }
        }
        guard outcome == true else {
            throw KeychainError(.interactionNotAllowed, outcome == nil ? "locked: the provider's unlock prompt got no answer" : "locked: its unlock prompt was dismissed")
        }
    }

    private static func seconds(_ value: BusValue?) -> UInt64 {
        if case .uint64(let v)? = value { v } else { 0 }
    }

    private func property(_ path: String, _ interface: String, _ name: String) throws(KeychainError) -> BusValue {
        let reply = try call(path, Self.properties, "Get", [.string(interface), .string(name)])
        guard let value = try reply.readValue().variantContents else { throw KeychainError(.decode, "\(interface).\(name) is not a variant") }
        return value
    }

    private func call(_ path: String, _ interface: String, _ member: String, _ arguments: [BusValue] = []) throws(KeychainError) -> BusMessage {
        try bus.call(destination: provider, path: path, interface: interface, member: member, arguments: arguments)
    }
}
