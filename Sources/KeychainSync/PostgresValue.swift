import KeychainModel

/// A value sent to or read from PostgreSQL, always in the binary format (docs/sync.md §10):
/// bytea travels as its bytes, never as escaped text, so a record body cannot be mangled by an
/// encoding setting, and integers are exact.
public enum PostgresValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// Sent as int8. Read from int2, int4 and int8 columns alike: the schema mixes them
    /// (epoch is integer, seq bigint) and callers want one integer type.
    case int(Int64)
    /// UTF-8. PostgreSQL refuses a NUL in text; use bytea for arbitrary bytes.
    case text(String)
    case bytea([UInt8])

    public var isNull: Bool { self == .null }

    public var bool: Bool? {
        if case .bool(let b) = self { b } else { nil }
    }

    public var int: Int64? {
        if case .int(let i) = self { i } else { nil }
    }

    public var text: String? {
        if case .text(let s) = self { s } else { nil }
    }

    public var bytes: [UInt8]? {
        if case .bytea(let b) = self { b } else { nil }
    }
}

/// What one statement returned: its rows, already copied out of libpq, and how many rows an
/// INSERT, UPDATE or DELETE affected (an upsert that lost its conflict affects 0: §5).
public struct PostgresResult: Sendable {
    public let columnNames: [String]
    public let rows: [[PostgresValue]]
    /// From the command tag; 0 for statements that report no count (BEGIN, LISTEN...).
    public let affectedRows: Int

    public init(columnNames: [String], rows: [[PostgresValue]], affectedRows: Int) {
        self.columnNames = columnNames
        self.rows = rows
        self.affectedRows = affectedRows
    }
}

/// A NOTIFY this connection received while it listened on `channel`.
public struct PostgresNotification: Sendable, Equatable {
    public let channel: String
    public let payload: String
    /// The server process that sent it: equal to this connection's own when it notified itself.
    public let senderProcessID: Int32

    public init(channel: String, payload: String, senderProcessID: Int32) {
        self.channel = channel
        self.payload = payload
        self.senderProcessID = senderProcessID
    }
}

/// Why a PostgreSQL call failed, in terms code can act on; carried as a KeychainError's
/// `underlying` error. The sync loop reconnects on `connectionLost` and `timedOut` (the
/// connection is then closed), and reports the rest.
public struct PostgresFailure: Error, Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// The connection string could not be parsed (its text is never repeated: it may hold a password).
        case badConnectionString
        /// No connection was made: the server is unreachable, refused us, or is too old.
        case connect
        /// The connection broke (server stopped, network gone); this connection is closed.
        case connectionLost
        /// The server did not answer within the call's timeout; the statement was cancelled,
        /// and when even the cancel went unanswered the connection was closed.
        case timedOut
        /// The server ran the statement and reported an error (see `sqlState`).
        case server
        /// A result this type cannot read (an unsupported column type, a malformed value).
        case unreadableResult
    }

    public let kind: Kind
    /// PostgreSQL's five-character SQLSTATE when the server gave one (23505: a unique violation).
    public let sqlState: String?

    public init(_ kind: Kind, sqlState: String? = nil) {
        self.kind = kind
        self.sqlState = sqlState
    }

    /// The keychain's status for a server error, by SQLSTATE class (PostgreSQL's appendix A).
    static func status(forSQLState state: String) -> KeychainStatus {
        switch state {
        case "23505": return .duplicateItem
        case "40001", "40P01": return .notAvailable // serialization failure, deadlock: retry
        case "57014": return .notAvailable // cancelled: by our timeout or by an operator
        case "42501": return .authFailed // insufficient privilege
        default: break
        }
        switch state.prefix(2) {
        case "08", "57", "53", "58": return .notAvailable // connection, shutdown, resources, system
        case "28": return .authFailed
        case "22", "23": return .param // bad data or a constraint the caller broke
        default: return .internal // a statement of ours the server refused: a bug
        }
    }
}
