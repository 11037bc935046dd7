/// A device's identity in a sync circle: the first 16 bytes of the hash of its public keys
/// (docs/sync.md, 2.1). Ordered by its bytes, as PostgreSQL orders bytea, so the conflict
/// order below is the same on the store and on every device.
public struct SyncDeviceID: Sendable, Hashable, Comparable, CustomStringConvertible {
    public static let byteCount = 16
    public let bytes: [UInt8]

    public init(_ bytes: [UInt8]) throws(KeychainError) {
        guard bytes.count == Self.byteCount else {
            throw KeychainError(.decode, "a sync device id is \(Self.byteCount) bytes, not \(bytes.count)")
        }
        self.bytes = bytes
    }

    public static func < (a: SyncDeviceID, b: SyncDeviceID) -> Bool {
        a.bytes.lexicographicallyPrecedes(b.bytes)
    }

    public var description: String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0xF)]] }, as: UTF8.self)
    }
}

/// The version of one synced item (docs/sync.md, section 5): compared as the tuple
/// (mdat, writer, counter), the greater winning on the store and on every device alike.
/// Signed 64-bit fields, as PostgreSQL's bigint columns hold them, so both sides compare the
/// same numbers the same way.
public struct SyncVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Modification time in milliseconds since 2001-01-01 (CFAbsoluteTime × 1000).
    public var mdat: Int64
    public var writer: SyncDeviceID
    /// The writer's own write number: 1, 2, 3... across every item it writes.
    public var counter: Int64

    public init(mdat: Int64, writer: SyncDeviceID, counter: Int64) {
        self.mdat = mdat
        self.writer = writer
        self.counter = counter
    }

    public static func < (a: SyncVersion, b: SyncVersion) -> Bool {
        if a.mdat != b.mdat { return a.mdat < b.mdat }
        if a.writer != b.writer { return a.writer < b.writer }
        return a.counter < b.counter
    }

    /// The mdat a writer stamps on a new version of an item last at `previous`: never before
    /// it, so that a device with a clock behind the others' still supersedes what it updates.
    public static func stampedMdat(now: Int64, previous: Int64?) -> Int64 {
        guard let previous else { return now }
        let (next, overflow) = previous.addingReportingOverflow(1)
        return max(now, overflow ? previous : next)
    }

    public var description: String { "(\(mdat), \(writer), \(counter))" }
}

/// Which of two versions of one item stays (docs/sync.md, section 5), as a pure function so
/// every device, and the tests, apply the same rule.
public enum SyncConflict: Sendable, Equatable {
    case takeIncoming
    case keepLocal
    /// The same version: nothing to do (a push retried after a lost acknowledgement).
    case identical

    public static func resolve(local: SyncVersion?, incoming: SyncVersion) -> SyncConflict {
        guard let local else { return .takeIncoming }
        if incoming > local { return .takeIncoming }
        return incoming == local ? .identical : .keepLocal
    }
}
