import DBus
import KeychainClient

/// What keychaind's status tells the bridge about changes it did not make itself (`keychain
/// delete`, add or update by another client, a restore, a lock or unlock): the database's
/// generation, which every committed write moves, and the lock state. One status call per
/// check, whatever the size of the keychain; a move says that something changed, never what,
/// so the bridge signals the collection as a whole and names no item.
struct KeychainChangeFeed {
    /// What moved since the previous observation.
    struct Moves: Equatable {
        var items = false
        var lockState = false
    }

    private var generation: Int64?
    private var locked: Bool?

    /// Takes a status answer. The first one only sets the baseline. A keychaind that does not
    /// send the generation (one that does not take this program for the bridge) moves nothing.
    mutating func observe(_ status: AttributeDictionary) -> Moves {
        var moves = Moves()
        if case .int(let now)? = status["generation"] {
            if let generation, generation != now { moves.items = true }
            generation = now
        }
        if case .string(let state)? = status["state"] {
            let now = state != "unlocked"
            if let locked, locked != now { moves.lockState = true }
            locked = now
        }
        return moves
    }

    /// The bridge signalled this lock state itself (its own Lock, a completed unlock prompt).
    mutating func noteLockState(locked: Bool) {
        self.locked = locked
    }
}

extension SecretServiceBridge {
    /// Asks keychaind for its status and signals what moved since the last check. Throws
    /// when keychaind cannot answer (as the keep-alive did: the bridge then exits).
    func checkForChanges() throws(KeychainError) {
        let moves = changeFeed.observe(try keychain.status())
        // What was read before the move may be stale (an item relabelled by `keychain update`).
        if moves.items || moves.lockState { readCache.removeAll() }
        if moves.lockState { lockStateChanged() }
        if moves.items { itemsChangedElsewhere() }
    }

    /// Items of login changed outside the bridge: CollectionChanged on the service, then
    /// PropertiesChanged with Items invalidated. No ItemCreated or ItemDeleted: the bridge
    /// cannot tell which items moved without a search, and the signals are broadcast, so a
    /// path named would reach every app whatever its groups.
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
