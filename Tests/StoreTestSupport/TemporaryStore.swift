#if canImport(Glibc)
import Glibc
#endif
import KeychainCrypto
import KeychainModel
import KeychainStorage
import KeychainStore

// The store fixture of KeychainStoreTests and KeychainSyncTests: one copy, over public API, for
// the same reason as the schema history beside it (two copies drift).

/// A store in a fresh temporary state directory, removed when the fixture goes away.
public final class TemporaryStore {
    public let directory: String
    /// Implicitly unwrapped so that it can be released before the file is opened again: the
    /// store holds the database's lock for as long as it lives.
    public var store: ItemStore!
    public var clock: TestClock

    public static let app = AccessScope(groups: ["com.example.app", "com.example.shared"])

    public init() throws {
        var template = Array("/tmp/kcstore.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp failed") }
        directory = String(cString: p)
        clock = TestClock()
        store = try ItemStore(configuration: Self.configuration(directory), clock: clock.read)
    }

    public static func configuration(_ directory: String) -> StoreConfiguration {
        StoreConfiguration(stateDirectory: directory, argon2: .testingOnly)
    }

    /// Closes the store and opens it again from disk, as a restart would.
    public func reopen() throws {
        store = nil
        store = try ItemStore(configuration: Self.configuration(directory), clock: clock.read)
    }

    /// Closes the store, lets `body` edit the database file directly (as someone holding the
    /// file would), then opens the store again.
    public func editFile(_ body: (SQLiteDatabase) throws -> Void) throws {
        store = nil
        do {
            let raw = try SQLiteDatabase(path: directory + "/keychain.db")
            try body(raw)
        }
        try reopen()
    }

    deinit {
        store = nil  // writes the clean-stop record, removed below
        for name in ["keychain.db", "keychain.db-wal", "keychain.db-shm", "device.key", "keychain.generation"] {
            unlink(directory + "/" + name)
        }
        rmdir(directory)
    }

    // Shorthands for the common calls, in the caller's default scope.
    @discardableResult
    public func add(_ dict: AttributeDictionary, scope: AccessScope = app) throws -> QueryResult {
        try store.items.add(dict, scope: scope)
    }

    public func copy(_ dict: AttributeDictionary, scope: AccessScope = app) throws -> QueryResult {
        try store.items.copyMatching(dict, scope: scope)
    }

    public func secret(_ dict: AttributeDictionary, scope: AccessScope = app) throws -> [UInt8]? {
        var query = dict
        query["r_Data"] = .bool(true)
        guard case .single(.data(let d)) = try copy(query, scope: scope) else { return nil }
        return Array(d)
    }

    public func attributes(_ dict: AttributeDictionary, scope: AccessScope = app) throws -> AttributeDictionary? {
        var query = dict
        query["r_Attributes"] = .bool(true)
        guard case .single(.attributes(let a)) = try copy(query, scope: scope) else { return nil }
        return a
    }

    public func count(_ dict: AttributeDictionary, scope: AccessScope = app) throws -> Int {
        var query = dict
        query["m_Limit"] = .string("m_LimitAll")
        query["r_PersistentRef"] = .bool(true)
        do {
            guard case .list(let items) = try copy(query, scope: scope) else { return -1 }
            return items.count
        } catch let error as KeychainError where error.status == .itemNotFound {
            return 0
        }
    }
}

/// A settable clock (CFAbsoluteTime), so date rules are tested without sleeping.
public final class TestClock: @unchecked Sendable {
    public var now: Double = 800_000_000  // 2026-05-09
    public var read: () -> Double { { [unowned self] in self.now } }
    public init() {}
}

public func genp(_ service: String, _ account: String, _ extra: AttributeDictionary = [:]) -> AttributeDictionary {
    var d: AttributeDictionary = ["class": .string("genp"), "svce": .string(service), "acct": .string(account)]
    d.merge(extra) { _, new in new }
    return d
}

public func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }

/// Tests write passcodes as plain arrays; the store takes them as SecretBytes.
extension ItemStore {
    public func unlock(passcode: [UInt8]) throws(KeychainError) { try unlock(passcode: SecretBytes(passcode)) }
    public func setPasscode(_ passcode: [UInt8]) throws(KeychainError) { try setPasscode(SecretBytes(passcode)) }
    public func changePasscode(old: [UInt8], new: [UInt8]) throws(KeychainError) {
        try changePasscode(old: SecretBytes(old), new: SecretBytes(new))
    }
    @discardableResult
    public func removePasscode(current: [UInt8]) throws(KeychainError) -> Int { try removePasscode(current: SecretBytes(current)) }
}
