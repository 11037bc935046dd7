import DBus
import KeychainClient

/// Changes made outside the bridge (`keychain delete`, add or update by another client or
/// through another bridge, a restore, a lock or unlock), as keychaind pushes them on the
/// bridge's change subscription (op 47): nothing is asked while nothing changes. keychaind
/// names each item the bridge may know of, marks the bridge's own changes (already signalled
/// when they were made), and says "unknown" for what it cannot name.
struct KeychainChangeFeed {
    /// The lock state last signalled, so that a lock the bridge signalled itself is not
    /// signalled again when keychaind's notice of it comes.
    var signalledLocked: Bool?

    /// The Secret Service signal for one notice of an item: the collection, the member and the
    /// item's path; nil for an item of no collection a client sees (collection records).
    static func signal(for notice: ChangeSubscription.Notice) -> (collection: CollectionName, member: String, path: String)? {
        guard notice.service.hasPrefix("secret-service:"), let id = ItemID(persistentRef: notice.persistentRef),
              let collection = CollectionName(name: String(notice.service.dropFirst("secret-service:".count))),
              collection != .session else { return nil }
        let member = switch notice.kind {
        case .created: "ItemCreated"
        case .deleted: "ItemDeleted"
        default: "ItemChanged"
        }
        return (collection, member, collection.itemPath(id.hex))
    }
}

extension SecretServiceBridge {
    /// Reads the notices keychaind sent (the subscription's descriptor was readable) and
    /// signals them. Throws when keychaind closed the subscription (it stopped).
    func takeChangeNotices() throws(KeychainError) {
        repeat {
            for notice in try changes.read() { signal(notice) }
        } while changes.hasBuffered
    }

    private func signal(_ notice: ChangeSubscription.Notice) {
        switch notice.kind {
        case .lock:
            if changeFeed.signalledLocked != notice.locked { lockStateChanged(locked: notice.locked) }
        case .unknown:
            readCache.removeAll()
            itemsChangedElsewhere()
        case .created, .changed, .deleted:
            guard !notice.own else { return }
            // What was read before may be stale (an item relabelled by `keychain update`).
            readCache.removeAll()
            guard let (collection, member, path) = KeychainChangeFeed.signal(for: notice) else { return }
            itemsChanged(collection, member, path)
        }
    }

    /// Items of login changed that keychaind does not name: CollectionChanged on the service,
    /// then PropertiesChanged with Items invalidated, so that clients read their lists again.
    func itemsChangedElsewhere() {
        let login = CollectionName.login.path
        do {
            try bus.emitSignal(path: SecretObjectPath.root, interface: Self.serviceInterface, member: "CollectionChanged", [.objectPath(login)])
            try bus.emitSignal(path: login, interface: Self.propertiesInterface, member: "PropertiesChanged",
                               [.string(Self.collectionInterface), .variantDictionary([:]), .array(element: "s", [.string("Items")])])
        } catch {
            BridgeLog.error("cannot signal a change made outside the bridge: \(error)")
        }
    }
}
