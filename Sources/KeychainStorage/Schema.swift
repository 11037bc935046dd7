import KeychainModel

/// Forward-only, append-only schema migrations, each in its own transaction, tracked in
/// PRAGMA user_version. A database from a newer keychaind is refused, never downgraded.
public enum Schema {
    /// Hashed lookup columns of the items table (h_<code>). Frozen with schema version 1: a
    /// later column needs a migration, not an edit here.
    public static let hashedColumns = [
        "labl", "acct", "svce", "sdmn", "srvr", "ptcl", "atyp", "port", "path",
        "ctyp", "issr", "slnr", "alis", "subj", "skid", "pkhh",
        "kcls", "klbl", "atag", "type", "crtr", "bsiz", "esiz", "sdat", "edat",
    ]

    static let migrations: [(name: String, sql: String)] = [
        ("v1: items, keybag", """
        CREATE TABLE items(
            rowid INTEGER PRIMARY KEY,
            class TEXT NOT NULL CHECK (class IN ('genp','inet','cert','keys')),
            persistref BLOB NOT NULL UNIQUE,
            agrp TEXT NOT NULL,
            pdmn TEXT NOT NULL,
            sync INTEGER NOT NULL DEFAULT 0,
            cdat REAL NOT NULL,
            mdat REAL NOT NULL,
            \(hashedColumns.map { "h_\($0) BLOB" }.joined(separator: ",\n    ")),
            data BLOB NOT NULL
        );
        CREATE UNIQUE INDEX items_pk_genp ON items(agrp, sync, h_acct, h_svce) WHERE class = 'genp';
        CREATE UNIQUE INDEX items_pk_inet ON items(agrp, sync, h_acct, h_sdmn, h_srvr, h_ptcl, h_atyp, h_port, h_path) WHERE class = 'inet';
        CREATE UNIQUE INDEX items_pk_cert ON items(agrp, sync, h_ctyp, h_issr, h_slnr) WHERE class = 'cert';
        CREATE UNIQUE INDEX items_pk_keys ON items(agrp, sync, h_kcls, h_klbl, h_atag, h_type, h_crtr, h_bsiz, h_esiz, h_sdat, h_edat) WHERE class = 'keys';
        CREATE INDEX items_svce ON items(h_svce) WHERE class = 'genp';
        CREATE INDEX items_srvr ON items(h_srvr) WHERE class = 'inet';
        CREATE INDEX items_pkhh ON items(h_pkhh) WHERE class = 'cert';
        CREATE INDEX items_klbl ON items(h_klbl) WHERE class = 'keys';
        CREATE INDEX items_pdmn ON items(pdmn);
        CREATE TABLE keybag(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            record BLOB NOT NULL
        );
        """),
        ("v2: wrong-passcode counter", """
        CREATE TABLE lockout(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            failures INTEGER NOT NULL,
            last_failure REAL NOT NULL
        );
        """),
        ("v3: generation", """
        CREATE TABLE generation(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value INTEGER NOT NULL
        );
        INSERT INTO generation(id, value) VALUES (1, 0);
        """),
        // Until version 4 a number in a blob attribute (acct 42) hashed as its decimal text, the
        // same as the string "42"; it now hashes as a number. Rows can only be rehashed with
        // their class key, so the classes that may hold such rows are listed here and each is
        // upgraded when its key is loaded (KeychainStore/LegacyNumbers.swift).
        ("v4: classes with rows to rehash", """
        CREATE TABLE number_rehash(pdmn TEXT PRIMARY KEY);
        INSERT INTO number_rehash(pdmn) SELECT DISTINCT pdmn FROM items;
        """),
        // The Secret Service's attribute search in O(log n) (docs/semantics.md): per item with
        // xsat, a keyed hash of each (name, value) pair and one of the whole set. No database
        // before this version holds such an item, so there is nothing to fill in. Rows go with
        // their item (the foreign key cascades; SQLiteDatabase turns foreign keys on).
        ("v5: Secret Service attribute index", """
        CREATE TABLE item_attributes(
            item INTEGER NOT NULL REFERENCES items(rowid) ON DELETE CASCADE,
            hash BLOB NOT NULL,
            PRIMARY KEY (hash, item)
        ) WITHOUT ROWID;
        CREATE INDEX item_attributes_item ON item_attributes(item);
        """),
        // Sync (docs/sync.md, 7.3), additive: no existing column changes. The circle tables
        // stay empty until a device joins. The outbox holds every sync = 1 item whose current
        // version the circle may not have, so the items a database already holds are queued
        // here, as their adds would have been (ThisDeviceOnly rows never: only an edited row
        // could be one with sync = 1).
        ("v6: sync state and outbox", """
        ALTER TABLE items ADD COLUMN sync_writer BLOB;
        ALTER TABLE items ADD COLUMN sync_counter INTEGER;
        CREATE TABLE sync_identity(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            device_id BLOB NOT NULL CHECK (length(device_id) = 16),
            sign_pk BLOB NOT NULL CHECK (length(sign_pk) = 32),
            kx_pk BLOB NOT NULL CHECK (length(kx_pk) = 32),
            sealed_secrets BLOB NOT NULL
        );
        CREATE TABLE sync_circle(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            circle_id BLOB NOT NULL CHECK (length(circle_id) = 16),
            epoch INTEGER NOT NULL,
            cursor INTEGER NOT NULL DEFAULT 0,
            counter INTEGER NOT NULL DEFAULT 0,
            last_full_pull INTEGER,
            state TEXT NOT NULL,
            store_roster_length INTEGER NOT NULL DEFAULT 0,
            store_roster_hash BLOB
        );
        CREATE TABLE sync_keys(
            circle_id BLOB NOT NULL,
            epoch INTEGER NOT NULL,
            sealed_key BLOB NOT NULL,
            PRIMARY KEY (circle_id, epoch)
        );
        CREATE TABLE sync_roster(
            circle_id BLOB NOT NULL,
            entry_no INTEGER NOT NULL,
            entry BLOB NOT NULL,
            sig BLOB NOT NULL CHECK (length(sig) = 64),
            PRIMARY KEY (circle_id, entry_no)
        );
        CREATE TABLE sync_writers_seen(
            writer BLOB PRIMARY KEY CHECK (length(writer) = 16),
            highest_counter INTEGER NOT NULL,
            head_counter INTEGER,
            head_roster_length INTEGER
        );
        CREATE TABLE sync_outbox(
            id INTEGER PRIMARY KEY,
            item INTEGER UNIQUE REFERENCES items(rowid) ON DELETE CASCADE,
            counter INTEGER,
            class TEXT,
            pdmn TEXT,
            identity BLOB,
            blob BLOB,
            mdat INTEGER,
            CHECK ((item IS NULL) = (blob IS NOT NULL)),
            CHECK (blob IS NULL OR (class IS NOT NULL AND pdmn IS NOT NULL AND identity IS NOT NULL AND mdat IS NOT NULL))
        );
        CREATE TABLE sync_inbox(
            record_id BLOB PRIMARY KEY CHECK (length(record_id) = 32),
            seq INTEGER NOT NULL,
            epoch INTEGER NOT NULL,
            mdat INTEGER NOT NULL,
            writer BLOB NOT NULL,
            counter INTEGER NOT NULL,
            tombstone INTEGER NOT NULL,
            body BLOB NOT NULL
        );
        INSERT INTO sync_outbox(item) SELECT rowid FROM items WHERE sync = 1 AND pdmn IN ('ak', 'ck', 'dk') ORDER BY rowid;
        """),
        // The stamp's mdat (ms since 2001): with sync_writer and sync_counter, the exact tuple
        // of the version the circle has. The item's own mdat cannot stand in for it: a pulled
        // item keeps its writer's mdat attribute, and a version's mdat may be bumped past the
        // one it supersedes (docs/sync.md, 5). No row is stamped before this version.
        ("v7: sync stamp mdat", """
        ALTER TABLE items ADD COLUMN sync_mdat INTEGER;
        """),
        // Rollback detection (docs/sync.md, 6): the highest signed head this device verified
        // per writer, and the reason of a rollback whose heal has not finished, so a heal cut
        // short (the database gone, a class locked) is taken up again by the next pass even
        // though the re-push already made the store look consistent. Nothing to fill in: the
        // first consistent pass remembers the heads.
        ("v8: sync heads seen", """
        CREATE TABLE sync_heads_seen(
            writer BLOB PRIMARY KEY CHECK (length(writer) = 16),
            counter INTEGER NOT NULL,
            roster_length INTEGER NOT NULL
        );
        ALTER TABLE sync_circle ADD COLUMN rollback TEXT;
        """),
        // The login slot (issue 26, docs/security.md "The login slot"): the sealed slot, if any,
        // and its wrong-password counter, apart from the passcode's so that a stale slot tried
        // at every login never delays the user's own unlock.
        ("v9: login slot", """
        CREATE TABLE login_slot(
            id INTEGER PRIMARY KEY CHECK (id = 1),
            record BLOB,
            failures INTEGER NOT NULL DEFAULT 0,
            last_failure REAL NOT NULL DEFAULT 0
        );
        """),
    ]

    public static var currentVersion: Int { migrations.count }

    /// Brings `db` up to the current version.
    public static func migrate(_ db: SQLiteDatabase) throws(KeychainError) {
        let found = try db.userVersion
        guard found <= currentVersion else {
            throw KeychainError(.notAvailable, "the database \(db.path) has schema version \(found), newer than this keychaind understands (\(currentVersion)); run a newer keychaind")
        }
        for version in found..<currentVersion {
            let step = migrations[version]
            try db.transaction { () throws(KeychainError) in
                try db.execute(step.sql)
                try db.execute("PRAGMA user_version = \(version + 1)")
            }
        }
    }
}
