/// At most `capacity` values by key; making room drops the least recently used one.
///
/// A hit costs one hash lookup and a counter stamp, with no allocation: it is on every
/// lookup's path. Only an insert into a full cache scans for the oldest stamp, O(capacity);
/// for the statement caches an insert follows a miss, which prepares a statement and costs
/// far more than scanning a hundred or so entries.
struct LRUCache<Key: Hashable, Value> {
    private struct Entry {
        let value: Value
        var lastUse: UInt64
    }

    let capacity: Int
    private var entries: [Key: Entry] = [:]
    /// Counts uses: an entry's stamp says when it was last used. 64 bits never wrap.
    private var clock: UInt64 = 0

    init(capacity: Int) {
        precondition(capacity > 0, "a cache holds at least one value")
        self.capacity = capacity
        // Room for every entry from the start: the table is never rehashed, however many
        // keys come and go.
        entries.reserveCapacity(capacity)
    }

    var count: Int { entries.count }

    /// The value for `key`, which becomes the most recently used; nil if not cached.
    mutating func value(for key: Key) -> Value? {
        guard let i = entries.index(forKey: key) else { return nil }
        clock &+= 1
        entries.values[i].lastUse = clock
        return entries.values[i].value
    }

    /// Caches `value` as the most recently used, dropping the least recently used entry if the
    /// cache is full (the dropped value is released here, unless someone else holds it).
    mutating func insert(_ value: Value, for key: Key) {
        if entries.count >= capacity, entries.index(forKey: key) == nil,
           let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
            entries.removeValue(forKey: oldest)
        }
        clock &+= 1
        entries[key] = Entry(value: value, lastUse: clock)
    }

    mutating func removeAll() {
        entries.removeAll(keepingCapacity: true)
    }
}
