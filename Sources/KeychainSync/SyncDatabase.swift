import KeychainModel

/// The circle's side of sync in PostgreSQL (docs/sync.md, 7.1): tables of opaque records,
/// roster entries, join requests, wrapped keys and heads, over one `PostgresConnection`.
/// The statements for membership and for records live in extensions beside this file; this
/// one holds the schema every device creates when it founds or joins a circle, and the name
/// of the channel a circle's pushes notify.
public struct SyncDatabase {
    public let connection: PostgresConnection

    public init(_ connection: PostgresConnection) { self.connection = connection }

    /// Creates the tables that are missing; several circles may share one database, and a
    /// device that joins finds them made already. Run in one transaction so two devices
    /// founding circles at once cannot leave half a schema.
    public func createSchema() throws(KeychainError) {
        try connection.transaction { (c) throws(KeychainError) in
            // Serializes concurrent creators: CREATE TABLE IF NOT EXISTS alone can still fail
            // on the catalog's unique index when two sessions race.
            _ = try c.query("SELECT pg_advisory_xact_lock(7236911)")
            for statement in Self.schema { _ = try c.query(statement) }
        }
    }

    static let schema = [
        """
        CREATE TABLE IF NOT EXISTS sync_circles (
          circle_id  bytea PRIMARY KEY CHECK (length(circle_id) = 16),
          epoch      integer NOT NULL CHECK (epoch >= 1),
          seq        bigint  NOT NULL DEFAULT 0
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sync_roster (
          circle_id bytea   NOT NULL REFERENCES sync_circles,
          entry_no  integer NOT NULL CHECK (entry_no >= 0),
          entry     bytea   NOT NULL,
          sig       bytea   NOT NULL CHECK (length(sig) = 64),
          PRIMARY KEY (circle_id, entry_no)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sync_devices (
          circle_id bytea NOT NULL REFERENCES sync_circles,
          device_id bytea NOT NULL CHECK (length(device_id) = 16),
          sign_pk   bytea NOT NULL CHECK (length(sign_pk) = 32),
          kx_pk     bytea NOT NULL CHECK (length(kx_pk) = 32),
          name      text  NOT NULL CHECK (octet_length(name) <= 64),
          self_sig  bytea NOT NULL CHECK (length(self_sig) = 64),
          requested timestamptz NOT NULL DEFAULT now(),
          PRIMARY KEY (circle_id, device_id)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sync_wrapped_keys (
          circle_id  bytea   NOT NULL REFERENCES sync_circles,
          epoch      integer NOT NULL,
          device_id  bytea   NOT NULL CHECK (length(device_id) = 16),
          wrapper_id bytea   NOT NULL CHECK (length(wrapper_id) = 16),
          wrapped    bytea   NOT NULL,
          sig        bytea   NOT NULL CHECK (length(sig) = 64),
          PRIMARY KEY (circle_id, epoch, device_id)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS sync_records (
          circle_id bytea   NOT NULL REFERENCES sync_circles,
          record_id bytea   NOT NULL CHECK (length(record_id) = 32),
          seq       bigint  NOT NULL,
          epoch     integer NOT NULL,
          mdat      bigint  NOT NULL,
          writer    bytea   NOT NULL CHECK (length(writer) = 16),
          counter   bigint  NOT NULL,
          tombstone boolean NOT NULL,
          body      bytea   NOT NULL,
          PRIMARY KEY (circle_id, record_id)
        )
        """,
        "CREATE UNIQUE INDEX IF NOT EXISTS sync_records_by_seq ON sync_records (circle_id, seq)",
        """
        CREATE TABLE IF NOT EXISTS sync_heads (
          circle_id   bytea   NOT NULL REFERENCES sync_circles,
          device_id   bytea   NOT NULL CHECK (length(device_id) = 16),
          epoch       integer NOT NULL,
          counter     bigint  NOT NULL,
          roster_len  integer NOT NULL,
          roster_hash bytea   NOT NULL CHECK (length(roster_hash) = 32),
          sig         bytea   NOT NULL CHECK (length(sig) = 64),
          PRIMARY KEY (circle_id, device_id)
        )
        """,
    ]

    /// `keychaind_sync_` and the circle id in lowercase hex: 47 characters, which unquoted
    /// LISTEN leaves as they are (it folds case; pg_notify does not).
    public static func channel(circleID: [UInt8]) -> String {
        let digits = Array("0123456789abcdef")
        var name = "keychaind_sync_"
        for byte in circleID {
            name.append(digits[Int(byte >> 4)])
            name.append(digits[Int(byte & 0x0f)])
        }
        return name
    }
}
