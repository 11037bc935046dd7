import KeychainCrypto
import KeychainModel

/// The membership statements (docs/sync.md, section 3 and 7.1): circles, roster entries, join
/// requests and wrapped keys. Nothing read here is believed as it comes: the callers verify
/// roster entries against the local copy, join requests by their self-signature and the typed
/// fingerprint, and wraps by their signer's membership (SyncMembership).
extension SyncDatabase {
    /// Founds a circle: its row, roster entry 0 and the founder's own request (which gives it
    /// a name in `devices`). One transaction.
    public func createCircle(_ roster: SyncRoster, founder: SyncJoinRequest) throws(KeychainError) {
        let circle = PostgresValue.bytea(roster.circleID.bytes)
        try connection.transaction { (c) throws(KeychainError) in
            try c.query("INSERT INTO sync_circles (circle_id, epoch) VALUES ($1, $2)", [circle, .int(Int64(roster.epoch))])
            for signed in roster.entries {
                try c.query("INSERT INTO sync_roster (circle_id, entry_no, entry, sig) VALUES ($1, $2, $3, $4)",
                            [circle, .int(Int64(signed.entry.number)), .bytea(signed.entry.encoded), .bytea(signed.signature)])
            }
            try insert(founder, on: c)
        }
    }

    /// Entry 0 of every circle in the database, to find the one whose fingerprint was typed.
    /// Rows that do not decode are skipped: they found no circle anyone could join.
    public func foundingEntries() throws(KeychainError) -> [SignedRosterEntry] {
        let result = try connection.query("SELECT entry, sig FROM sync_roster WHERE entry_no = 0")
        return result.rows.compactMap { row in try? Self.signedEntry(row[0], row[1]) }
    }

    /// The stored roster of `circleID`, in entry order, as stored (to be verified by the caller).
    /// errSecDecode for a row that is not an entry at all, or numbers with a gap.
    public func roster(circleID: SyncCircleID) throws(KeychainError) -> [SignedRosterEntry] {
        let result = try connection.query("SELECT entry_no, entry, sig FROM sync_roster WHERE circle_id = $1 ORDER BY entry_no",
                                           [.bytea(circleID.bytes)])
        var out: [SignedRosterEntry] = []
        for row in result.rows {
            let signed = try Self.signedEntry(row[1], row[2])
            guard row[0].int == Int64(out.count), signed.entry.number == UInt32(out.count) else {
                throw KeychainError(.decode, "the store's roster row \(row[0].int ?? -1) is out of order or not the entry its number says")
            }
            out.append(signed)
        }
        return out
    }

    /// A device's request to join, replacing an earlier one of the same device (a rerun join).
    public func requestToJoin(_ request: SyncJoinRequest) throws(KeychainError) {
        try connection.transaction { (c) throws(KeychainError) in
            let found = try c.query("SELECT 1 FROM sync_circles WHERE circle_id = $1", [.bytea(request.circleID.bytes)])
            guard !found.rows.isEmpty else { throw KeychainError(.itemNotFound, "the circle is not in the database") }
            try insert(request, on: c)
        }
    }

    /// Deletes `device`'s join request (a pending device that leaves): no member sees it
    /// waiting any more.
    public func withdrawJoinRequest(circleID: SyncCircleID, device: SyncDeviceID) throws(KeychainError) {
        try connection.query("DELETE FROM sync_devices WHERE circle_id = $1 AND device_id = $2",
                             [.bytea(circleID.bytes), .bytea(device.bytes)])
    }

    /// Every join request of the circle, as stored. Rows whose keys are malformed are skipped.
    public func joinRequests(circleID: SyncCircleID) throws(KeychainError) -> [SyncJoinRequest] {
        let result = try connection.query("SELECT sign_pk, kx_pk, name, self_sig FROM sync_devices WHERE circle_id = $1",
                                          [.bytea(circleID.bytes)])
        return result.rows.compactMap { row -> SyncJoinRequest? in
            guard let sign = row[0].bytes, let kx = row[1].bytes, let name = row[2].text, let sig = row[3].bytes,
                  let keys = try? SyncDeviceKeys(signPublicKey: sign, agreementPublicKey: kx) else { return nil }
            return SyncJoinRequest(circleID: circleID, device: keys, name: name, signature: sig)
        }
    }

    /// Appends `entry` and, with it, `wrap`: one transaction holding the circle row's lock, and
    /// only if the entry is the next number (append only: a member that signed against an
    /// older roster is refused with errSecNotAvailable and may refresh and try again).
    public func append(_ entry: SignedRosterEntry, wrapping wrap: SyncWrappedKey?) throws(KeychainError) {
        let circle = PostgresValue.bytea(entry.entry.circleID.bytes)
        try connection.transaction { (c) throws(KeychainError) in
            let locked = try c.query("SELECT epoch FROM sync_circles WHERE circle_id = $1 FOR UPDATE", [circle])
            guard !locked.rows.isEmpty else { throw KeychainError(.itemNotFound, "the circle is not in the database") }
            let count = try c.query("SELECT count(*)::int8 FROM sync_roster WHERE circle_id = $1", [circle])
            guard count.rows.first?.first?.int == Int64(entry.entry.number) else {
                throw KeychainError(.notAvailable, "the circle's roster changed while this entry was signed; run the command again")
            }
            try c.query("INSERT INTO sync_roster (circle_id, entry_no, entry, sig) VALUES ($1, $2, $3, $4)",
                        [circle, .int(Int64(entry.entry.number)), .bytea(entry.entry.encoded), .bytea(entry.signature)])
            // Every device's loop LISTENs on the channel: an approved device refreshes, takes
            // its key and pulls now, not at its next timed pass; members see a leave at once.
            try c.notify(Self.channel(circleID: entry.entry.circleID.bytes), payload: "roster \(entry.entry.number)")
            if let wrap {
                try c.query("""
                    INSERT INTO sync_wrapped_keys (circle_id, epoch, device_id, wrapper_id, wrapped, sig)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    ON CONFLICT (circle_id, epoch, device_id) DO UPDATE
                      SET wrapper_id = excluded.wrapper_id, wrapped = excluded.wrapped, sig = excluded.sig
                    """, [circle, .int(Int64(wrap.epoch)), .bytea(wrap.recipient.bytes), .bytea(wrap.wrapper.bytes),
                          .bytea(wrap.wrapped), .bytea(wrap.signature)])
            }
        }
    }

    /// Appends a `remove` entry and starts its epoch, all in one transaction holding the circle
    /// row's lock (docs/sync.md, section 3): the wraps of the new key go in, every record row of
    /// the old epoch is handed to `reseal` in seq order and replaced by what it returns (new
    /// seqs from the circle row, in the same order; nil drops the row), and the circle's epoch
    /// moves on. The database therefore never holds two epochs' rows. A roster that grew since
    /// `entry` was signed refuses it with errSecNotAvailable (refresh and look again: another
    /// member may have rotated already); nothing is written then.
    public func rotate(_ entry: SignedRosterEntry, wraps: [SyncWrappedKey],
                       reseal: (SyncRecordRow) throws(KeychainError) -> SyncRecordRow?) throws(KeychainError) -> SyncRotationCount {
        let circle = PostgresValue.bytea(entry.entry.circleID.bytes)
        let next = entry.entry.epoch
        return try connection.transaction { (c) throws(KeychainError) -> SyncRotationCount in
            let locked = try c.query("SELECT epoch FROM sync_circles WHERE circle_id = $1 FOR UPDATE", [circle])
            guard let current = locked.rows.first?.first?.int else {
                throw KeychainError(.itemNotFound, "the circle is not in the database")
            }
            let count = try c.query("SELECT count(*)::int8 FROM sync_roster WHERE circle_id = $1", [circle])
            guard count.rows.first?.first?.int == Int64(entry.entry.number), current + 1 == Int64(next) else {
                throw KeychainError(.notAvailable, "the circle's roster changed while the rotation was prepared; refresh and run it again")
            }
            try c.query("INSERT INTO sync_roster (circle_id, entry_no, entry, sig) VALUES ($1, $2, $3, $4)",
                        [circle, .int(Int64(entry.entry.number)), .bytea(entry.entry.encoded), .bytea(entry.signature)])
            for wrap in wraps {
                try c.query("""
                    INSERT INTO sync_wrapped_keys (circle_id, epoch, device_id, wrapper_id, wrapped, sig)
                    VALUES ($1, $2, $3, $4, $5, $6)
                    """, [circle, .int(Int64(wrap.epoch)), .bytea(wrap.recipient.bytes), .bytea(wrap.wrapper.bytes),
                          .bytea(wrap.wrapped), .bytea(wrap.signature)])
            }
            // Every row of the circle, whatever epoch its column claims: only the current
            // epoch's can open, and a row that does not is dropped with the rest.
            let old = try c.query("""
                SELECT record_id, seq, epoch, mdat, writer, counter, tombstone, body FROM sync_records
                WHERE circle_id = $1 ORDER BY seq
                """, [circle])
            var resealed: [SyncRecordRow] = []
            var dropped = 0
            for values in old.rows {
                guard let seq = values[1].int, let row = Self.recordRow(values, seq: seq),
                      let fresh = try reseal(row) else { dropped += 1; continue }
                guard fresh.epoch == next, fresh.recordID.count == 32 else {
                    throw KeychainError(.param, "a re-sealed row must be of epoch \(next) with a 32-byte record id")
                }
                resealed.append(fresh)
            }
            try c.query("DELETE FROM sync_records WHERE circle_id = $1", [circle])
            // The departed device's join request goes too, so no member sees it waiting again.
            try c.query("DELETE FROM sync_devices WHERE circle_id = $1 AND device_id = $2",
                        [circle, .bytea(entry.entry.subject.id.bytes)])
            let taken = try c.query("UPDATE sync_circles SET epoch = $2, seq = seq + $3 WHERE circle_id = $1 RETURNING seq",
                                    [circle, .int(Int64(next)), .int(Int64(resealed.count))])
            guard let last = taken.rows.first?.first?.int else { throw KeychainError(.decode, "the circle row went away") }
            var seq = last - Int64(resealed.count)
            for row in resealed {
                seq += 1
                // Two rows of the old epoch can name one item under the new key only if a
                // member sealed the same item twice; the later (greater version) wins.
                try c.query("""
                    INSERT INTO sync_records AS r (circle_id, record_id, seq, epoch, mdat, writer, counter, tombstone, body)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                    ON CONFLICT (circle_id, record_id) DO UPDATE SET
                      seq = excluded.seq, mdat = excluded.mdat, writer = excluded.writer,
                      counter = excluded.counter, tombstone = excluded.tombstone, body = excluded.body
                    WHERE (excluded.mdat, excluded.writer, excluded.counter) > (r.mdat, r.writer, r.counter)
                    """, [circle, .bytea(row.recordID), .int(seq), .int(Int64(next)), .int(row.version.mdat),
                          .bytea(row.version.writer.bytes), .int(row.version.counter), .bool(row.tombstone), .bytea(row.body)])
            }
            try c.notify(Self.channel(circleID: entry.entry.circleID.bytes), payload: String(last))
            return SyncRotationCount(resealed: resealed.count, dropped: dropped)
        }
    }

    /// The key wrapped to `device` for `epoch`, if any, as stored (verified by the unwrap).
    public func wrappedKey(circleID: SyncCircleID, epoch: UInt32, device: SyncDeviceID) throws(KeychainError) -> SyncWrappedKey? {
        let result = try connection.query("""
            SELECT wrapper_id, wrapped, sig FROM sync_wrapped_keys WHERE circle_id = $1 AND epoch = $2 AND device_id = $3
            """, [.bytea(circleID.bytes), .int(Int64(epoch)), .bytea(device.bytes)])
        guard let row = result.rows.first else { return nil }
        guard let wrapper = row[0].bytes, let wrapped = row[1].bytes, let sig = row[2].bytes else {
            throw KeychainError(.decode, "the store's wrapped key row has empty columns")
        }
        return SyncWrappedKey(circleID: circleID, epoch: epoch, recipient: device, wrapper: try SyncDeviceID(wrapper),
                              wrapped: wrapped, signature: sig)
    }

    private func insert(_ request: SyncJoinRequest, on c: PostgresConnection) throws(KeychainError) {
        try c.query("""
            INSERT INTO sync_devices (circle_id, device_id, sign_pk, kx_pk, name, self_sig) VALUES ($1, $2, $3, $4, $5, $6)
            ON CONFLICT (circle_id, device_id) DO UPDATE SET name = excluded.name, self_sig = excluded.self_sig, requested = now()
            """, [.bytea(request.circleID.bytes), .bytea(request.device.id.bytes), .bytea(request.device.signPublicKey),
                  .bytea(request.device.agreementPublicKey), .text(request.name), .bytea(request.signature)])
    }

    private static func signedEntry(_ entry: PostgresValue, _ sig: PostgresValue) throws(KeychainError) -> SignedRosterEntry {
        guard let bytes = entry.bytes, let signature = sig.bytes else {
            throw KeychainError(.decode, "a roster row of the store has empty columns")
        }
        return SignedRosterEntry(entry: try SyncRosterEntry(decoding: bytes), signature: signature)
    }
}

/// What a rotation did to the old epoch's rows.
public struct SyncRotationCount: Sendable, Equatable {
    /// Rows sealed again under the new key (with new record ids).
    public var resealed: Int
    /// Rows that did not open under the old key, tombstones (see SyncRotation), and rows of an
    /// impossible shape: not carried into the new epoch.
    public var dropped: Int
}
