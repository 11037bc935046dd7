import KeychainModel
import KeychainStorage

/// One committed change to a Secret Service item (svce "secret-service:..."), for keychaind's
/// change notices (op 47): what the Secret Service bridge turns into ItemCreated, ItemChanged
/// and ItemDeleted. Only references, collections and groups: never an attribute or a secret.
public struct SecretServiceChange: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case created, changed, deleted
        /// Items changed that the store cannot name (a delete of a locked item by its
        /// columns alone): the subscriber re-reads whatever it shows.
        case unknown
    }

    public let kind: Kind
    /// The item's 20-byte persistent reference; empty for `unknown`.
    public let persistentRef: [UInt8]
    /// Its svce; empty for `unknown`.
    public let service: String
    /// Its access group; empty for `unknown`.
    public let accessGroup: String

    public init(kind: Kind, persistentRef: [UInt8], service: String, accessGroup: String) {
        self.kind = kind
        self.persistentRef = persistentRef
        self.service = service
        self.accessGroup = accessGroup
    }
}

extension ItemStore {
    static let secretServicePrefix = "secret-service:"

    /// Notes a change of `row` (whose attributes are `attributes`) if it is a Secret Service
    /// item and someone listens (`notesSecretServiceChanges`).
    func noteSecretServiceChange(_ kind: SecretServiceChange.Kind, row: ItemRow, attributes: AttributeDictionary) {
        guard notesSecretServiceChanges, row.itemClass == .genericPassword, case .string(let svce)? = attributes["svce"],
              svce.hasPrefix(Self.secretServicePrefix) else { return }
        secretServiceChanges.append(SecretServiceChange(kind: kind, persistentRef: PersistentRef(itemClass: row.itemClass, id: row.persistentID).bytes,
                                                        service: svce, accessGroup: row.accessGroup))
    }

    /// Before the rows `filter` selects are deleted by one statement: each generic password
    /// among them noted as deleted, opened for its svce where its class is unlocked, else an
    /// unknown change. Nothing is read while nobody listens.
    func noteSecretServiceDeletes(_ filter: RowFilter) throws(KeychainError) {
        guard notesSecretServiceChanges, filter.itemClass == .genericPassword else { return }
        var rows: [ItemRow] = []
        try table.forEach(filter) { row in
            rows.append(row)
            return true
        }
        for row in rows {
            guard let item = try? open(row) else {
                // Unnamed, but its group (a clear column) still says who may hear of it.
                secretServiceChanges.append(SecretServiceChange(kind: .unknown, persistentRef: [], service: "", accessGroup: row.accessGroup))
                continue
            }
            noteSecretServiceChange(.deleted, row: row, attributes: item.attributes)
        }
    }

    /// The changes noted since the last call, in order; the list is emptied.
    public func takeSecretServiceChanges() -> [SecretServiceChange] {
        defer { secretServiceChanges.removeAll(keepingCapacity: true) }
        return secretServiceChanges
    }
}
