import DBus
import Foundation

/// What the bridge read from keychaind for one connection and may answer again without asking:
/// an item's properties (Label, Attributes, Locked, Created, Modified: never its secret) and
/// the records of the caller's created collections (their labels, ids and aliases). A secretstorage lookup asks for
/// Label and then Locked of the same item; both come from one keychaind call.
///
/// Kept per connection, since what keychaind shows is decided by the caller's groups. Emptied
/// when keychaind's generation or lock state moves (the change check sees that within its
/// period, a second), at once when the bridge itself writes (an item's write drops that item's entries, a collection's
/// or alias's change drops all), locks or unlocks, and for one
/// connection when it leaves the bus. An entry also lapses after `maxAge`, which bounds what
/// the generation cannot see: a process that execs another program keeps its connection, and
/// an `ak` item's key goes after keychaind's grace period without a write.
struct ReadCache {
    static let maxAge: Double = 5
    /// Past this many entries in all, the cache starts again empty: a bound on the bridge's
    /// memory, not an eviction policy.
    static let maxEntries = 8192

    enum Key: Hashable {
        case itemProperties(path: String)
        case collectionRecords
    }

    enum Value {
        case properties([String: BusValue])
        case collectionRecords([CollectionRecord])
    }

    private var entries: [String: [Key: (value: Value, stored: Double)]] = [:]
    private var count = 0

    func value(_ key: Key, of connection: String, now: Double = ProcessInfo.processInfo.systemUptime) -> Value? {
        guard let entry = entries[connection]?[key], now - entry.stored < Self.maxAge else { return nil }
        return entry.value
    }

    mutating func store(_ value: Value, _ key: Key, of connection: String, now: Double = ProcessInfo.processInfo.systemUptime) {
        if count >= Self.maxEntries { removeAll() }
        if entries[connection, default: [:]].updateValue((value, now), forKey: key) == nil { count += 1 }
    }

    mutating func remove(connection: String) {
        count -= entries.removeValue(forKey: connection)?.count ?? 0
    }

    /// One item changed through the bridge: its properties go for every connection (a
    /// collection's records stay, which an item's change does not move).
    mutating func remove(itemPath path: String) {
        for connection in Array(entries.keys) where entries[connection]?.removeValue(forKey: .itemProperties(path: path)) != nil {
            count -= 1
        }
    }

    mutating func removeAll() {
        entries = [:]
        count = 0
    }

    var isEmpty: Bool { count == 0 }
}
