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
