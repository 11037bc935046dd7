import Foundation
import KeychainClient
import KeychainModel
import KeychainStore
import Testing

/// The four SecItem calls, whoever answers them: a suite written against this runs unchanged
/// on the store in this process and on the daemon through the client, so that what the daemon
/// answers cannot drift from what the store does.
protocol SecItemBackend {
    @discardableResult
    func add(_ attributes: AttributeDictionary) throws(KeychainError) -> QueryResult
    func copyMatching(_ query: AttributeDictionary) throws(KeychainError) -> QueryResult
    func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) throws(KeychainError)
    func delete(_ query: AttributeDictionary) throws(KeychainError)
}

/// Which backend a parameterized test runs on. Both give the caller the same two access groups.
enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inProcessStore
    case daemonThroughClient

    static let groups = ["com.example.app", "com.example.shared"]
    var testDescription: String { rawValue }

    func make() throws -> any SecItemBackend {
        switch self {
        case .inProcessStore: try InProcessStore(groups: Self.groups)
        case .daemonThroughClient: try DaemonThroughClient(groups: Self.groups)
        }
    }
}

/// ItemStore in a temporary state directory, called with a fixed access scope.
final class InProcessStore: SecItemBackend {
    private let directory: String
    private var store: ItemStore?
    private let scope: AccessScope

    init(groups: [String]) throws {
        var template = Array("/tmp/kcbe.XXXXXX".utf8CString)
        guard let p = mkdtemp(&template) else { throw KeychainError(.io, "mkdtemp") }
        directory = String(cString: p)
        scope = AccessScope(groups: groups)
        store = try ItemStore(configuration: StoreConfiguration(stateDirectory: directory))
    }

    deinit {
        store = nil  // closes the database before its directory goes
        try? FileManager.default.removeItem(atPath: directory)
    }

    func add(_ attributes: AttributeDictionary) throws(KeychainError) -> QueryResult {
        try store!.items.add(attributes, scope: scope)
    }

    func copyMatching(_ query: AttributeDictionary) throws(KeychainError) -> QueryResult {
        try store!.items.copyMatching(query, scope: scope)
    }

    func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) throws(KeychainError) {
        try store!.items.update(query, changes: changes, scope: scope)
    }

    func delete(_ query: AttributeDictionary) throws(KeychainError) {
        try store!.items.delete(query, scope: scope)
    }
}

/// A real keychaind whose config gives this test's uid `groups`, called through KeychainConnection.
final class DaemonThroughClient: SecItemBackend {
    private let daemon: RunningDaemon
    private let connection: KeychainConnection

    init(groups: [String]) throws {
        let list = groups.map { "\"\($0)\"" }.joined(separator: ", ")
        daemon = try RunningDaemon(config: "[[app]]\nid = \"backend.test\"\nuids = [\(getuid())]\ngroups = [\(list)]")
        connection = KeychainConnection(socketPath: daemon.socketPath)
    }

    func add(_ attributes: AttributeDictionary) throws(KeychainError) -> QueryResult {
        try connection.add(attributes)
    }

    func copyMatching(_ query: AttributeDictionary) throws(KeychainError) -> QueryResult {
        try connection.copyMatching(query)
    }

    func update(_ query: AttributeDictionary, _ changes: AttributeDictionary) throws(KeychainError) {
        try connection.update(query, changes)
    }

    func delete(_ query: AttributeDictionary) throws(KeychainError) {
        try connection.delete(query)
    }
}
