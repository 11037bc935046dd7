#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel

/// The database's generation (its count of committed write transactions) as keychaind last
/// knew it, kept outside the database: a database that lost committed transactions (its
/// write-ahead log truncated or deleted, the file replaced by an older copy) is then noticed
/// at the next start instead of being served as if nothing happened.
struct GenerationRecord: Equatable {
    enum State: UInt8 {
        /// Written at start, once the database has been checked: it had this generation then.
        /// After a crash the record still says so, and the database may only be ahead of it.
        case running = 0
        /// Written at a clean stop, after the last transaction: the database has exactly this
        /// generation.
        case clean = 1
    }

    var state: State
    var generation: Int64

    /// Refuses (errSecDecode) a database whose generation is behind the record. One ahead of
    /// it lost nothing: it was written by something that did not keep the record.
    func check(databaseGeneration found: Int64, databasePath db: String, recordPath: String) throws(KeychainError) {
        guard found < generation else { return }
        let lost = generation - found
        let since = switch state {
        case .clean: "since keychaind last stopped cleanly"
        case .running: "that it held when keychaind last started (it has not stopped cleanly since)"
        }
        throw KeychainError(.decode, "\(db) has lost \(lost) committed transaction\(lost == 1 ? "" : "s") \(since): it is at generation \(found), \(recordPath) says \(generation). Its write-ahead log (\(db)-wal) was truncated or deleted, or it was replaced by an older copy; what \(lost == 1 ? "it" : "they") added, changed or deleted is missing or back as it was. Put the missing file back if you can. To accept the loss and serve the database as it is, remove \(recordPath) and start keychaind again.")
    }
}

/// The record's file in the state directory: 45 bytes, mode 0600, replaced atomically, and
/// authenticated with a key derived from the device key, so that it cannot be edited to
/// match a database that lost transactions.
struct GenerationRecordFile {
    static let fileName = "keychain.generation"
    private static let magic = Array("KCG1".utf8)
    private static let macBytes = 32
    private static let size = magic.count + 1 + 8 + macBytes
    private static let domain = "keychaind/v1/generation-record"

    let path: String
    private let key: SecureKey

    init(path: String, deviceKey: SecureKey) {
        self.path = path
        key = deviceKey.derive(id: 3, context: "record__")
    }

    /// The record, or nil if there is none (a first start, a keychain from before records, or
    /// an operator who removed it to accept a loss). errSecDecode if it is not one of ours.
    func read() throws(KeychainError) -> GenerationRecord? {
        let fd: Int32
        do {
            fd = try SystemCall.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            if error.errno == ENOENT { return nil }
            throw error.keychainError("cannot open \(path)")
        }
        defer { close(fd) }
        // One byte more than a record: a longer file is not one.
        var bytes = [UInt8](repeating: 0, count: Self.size + 1)
        let read = bytes.withUnsafeMutableBytes { b in Result { () throws(SystemCallError) in try SystemCall.readFully(fd, into: b) } }
        let n: Int
        switch read {
        case .success(let count): n = count
        case .failure(let error): throw error.keychainError("cannot read \(path)")
        }
        guard n == Self.size, Array(bytes[0..<Self.magic.count]) == Self.magic,
              let state = GenerationRecord.State(rawValue: bytes[Self.magic.count]) else {
            throw unreadable("it is not a generation record")
        }
        let body = Array(bytes[0..<(Self.size - Self.macBytes)])
        guard Sodium.constantTimeEqual(mac(body), Array(bytes[(Self.size - Self.macBytes)..<Self.size])) else {
            throw unreadable("it fails its authentication check (it was edited, or comes from a keychain with another device key)")
        }
        let generation = body[(Self.magic.count + 1)...].reduce(Int64(0)) { $0 << 8 | Int64($1) }
        return GenerationRecord(state: state, generation: generation)
    }

    /// Replaces the record durably (DurableFile).
    func write(_ record: GenerationRecord) throws(KeychainError) {
        var body = Self.magic + [record.state.rawValue]
        body += (0..<8).reversed().map { UInt8(truncatingIfNeeded: record.generation >> (8 * $0)) }
        let bytes = body + mac(body)
        let written = bytes.withUnsafeBytes { b in
            Result { () throws(SystemCallError) in try DurableFile.write(b, to: path, placement: .replace) }
        }
        if case .failure(let error) = written { throw error.keychainError("cannot write \(path) (\(error.call))") }
    }

    private func mac(_ body: [UInt8]) -> [UInt8] {
        KeyedHash.hash(domain: Self.domain, body, key: key, outputBytes: Self.macBytes)
    }

    private func unreadable(_ why: String) -> KeychainError {
        KeychainError(.decode, "\(path) cannot be used: \(why). keychaind cannot tell whether the database lost committed transactions. If you accept the database as it is, remove \(path) and start keychaind again.")
    }
}
