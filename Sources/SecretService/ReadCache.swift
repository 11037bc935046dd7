import DBus
import Foundation

/// What the bridge read from keychaind for one connection and may answer again without asking:
/// an item's properties (Label, Attributes, Locked, Created, Modified: never its secret) and
/// the records of the caller's created collections (their labels, ids and aliases). A secretstorage lookup asks for
/// Label and then Locked of the same item; both come from one keychaind call.
///
/// Kept per connection, since what keychaind shows is decided by the caller's groups, and
/// stamped with the executable the connection's process ran when the bridge asked keychaind:
/// a lookup made while it runs another (it exec'd, keeping the connection) or while that
/// cannot be read drops the connection's entries, so the new program is answered by keychaind,
/// which judges the program running now. Emptied
/// when keychaind's generation or lock state moves (the change check sees that within its
/// period, a second), at once when the bridge itself writes (an item's write drops that item's entries, a collection's
/// or alias's change drops all), locks or unlocks, and for one
/// connection when it leaves the bus. An entry also lapses after `maxAge`, which bounds what
/// the generation cannot see: an `ak` item's key goes after keychaind's grace period without a write.
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
        case collectionRecords(CollectionRecordSet)
    }

    private struct Entries {
        let executable: ExecutableStamp
        var values: [Key: (value: Value, stored: Double)] = [:]
    }

    private var entries: [String: Entries] = [:]
    private var count = 0

    /// `executable`: what the connection's process runs now (nil: unreadable).
    mutating func value(_ key: Key, of connection: String, executable: ExecutableStamp?,
                        now: Double = ProcessInfo.processInfo.systemUptime) -> Value? {
        guard let kept = entries[connection] else { return nil }
        guard kept.executable == executable else {
            remove(connection: connection)
            return nil
        }
        guard let entry = kept.values[key], now - entry.stored < Self.maxAge else { return nil }
        return entry.value
    }

    /// `executable`: what the connection's process ran before keychaind was asked for `value`
    /// (nil: unreadable, and nothing is kept).
    mutating func store(_ value: Value, _ key: Key, of connection: String, executable: ExecutableStamp?,
                        now: Double = ProcessInfo.processInfo.systemUptime) {
        guard let executable else {
            remove(connection: connection)
            return
        }
        if entries[connection]?.executable != executable { remove(connection: connection) }
        if count >= Self.maxEntries { removeAll() }
        if entries[connection, default: Entries(executable: executable)].values.updateValue((value, now), forKey: key) == nil {
            count += 1
        }
    }

    mutating func remove(connection: String) {
        count -= entries.removeValue(forKey: connection)?.values.count ?? 0
    }

    /// One item changed through the bridge: its properties go for every connection (a
    /// collection's records stay, which an item's change does not move).
    mutating func remove(itemPath path: String) {
        for connection in Array(entries.keys) where entries[connection]?.values.removeValue(forKey: .itemProperties(path: path)) != nil {
            count -= 1
        }
    }

    mutating func removeAll() {
        entries = [:]
        count = 0
    }

    var isEmpty: Bool { count == 0 }
}

/// Which executable file a process runs: /proc/PID/exe's device and inode. An exec of another
/// file changes it; a copy of a program at another path is another file.
struct ExecutableStamp: Hashable, Sendable {
    let device: UInt64
    let inode: UInt64
}
