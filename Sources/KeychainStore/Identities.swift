import KeychainModel
import KeychainStorage

/// Identities are never stored: an identity is a certificate joined with a key marked private
/// (priv = 1, kSecAttrIsPrivate) whose application label (klbl) equals the certificate's
/// public-key hash (pkhh), as in securityd. The key class (kcls) plays no part. Both columns
/// hash under one domain, so the join works on hashes without decrypting.
struct Identity: Sendable {
    var certificate: StoredItem
    var key: StoredItem
}

/// The identities of one store: found by the join, answered, updated and deleted as pairs.
struct Identities {
    let store: ItemStore

    /// Attributes an identity query matches against the certificate; all others (agrp, pdmn,
    /// sync and key attributes) match against the key, as in securityd.
    static let certificateAttributes: Set<String> = [
        "labl", "issr", "slnr", "skid", "subj", "ctyp", "cenc", "pkhh", "alis", "spkh",
    ]

    private func split(_ attributes: AttributeDictionary) -> (cert: AttributeDictionary, key: AttributeDictionary) {
        var cert: AttributeDictionary = [:]
        var key: AttributeDictionary = [:]
        for (code, value) in attributes {
            if Self.certificateAttributes.contains(code) { cert[code] = value } else { key[code] = value }
        }
        return (cert, key)
    }

    func find(_ query: ItemQuery, groups: [String], limit: Int?) throws(KeychainError) -> [Identity] {
        let (certAttributes, keyAttributes) = split(query.attributes)
        var certQuery = query
        certQuery.persistentRef = query.persistentRef.map { PersistentRef(itemClass: .certificate, id: $0.id) }
        let certPlan = store.items.plan(.certificate, attributes: certAttributes, groups: groups, query: certQuery)
        let (certificates, certCorrupt) = try store.items.find(certPlan, limit: nil, withAttributes: true)
        var keyQuery = query
        keyQuery.persistentRef = nil
        var found: [Identity] = []
        var corrupt = certCorrupt
        for certificate in certificates {
            guard let keyID = certificate.row.hashes["pkhh"] else { continue }
            var keyPlan = store.items.plan(.key, attributes: keyAttributes, groups: groups, query: keyQuery)
            keyPlan.filter.hashes.append(("klbl", keyID))
            keyPlan.checks.append((ClassSchema.key.spec("priv")!, .int(1)))
            let (keys, keyCorrupt) = try store.items.find(keyPlan, limit: 1, withAttributes: true)
            corrupt += keyCorrupt
            if let key = keys.first { found.append(Identity(certificate: certificate, key: key)) }
            if let limit, found.count >= limit { break }
        }
        guard !found.isEmpty else { throw SecItems.nothingFound(corrupt: corrupt) }
        return found
    }

    /// Key attributes overlaid by the certificate's; v_Data is the key, certdata the certificate.
    /// `confirmed`: the person allowed this call to read the bytes of keys that ask first
    /// (SplitReader asks, outside the lock); without it such a key's bytes are never an answer.
    static func result(_ identities: [Identity], query: ItemQuery, confirmed: Bool) throws(KeychainError) -> QueryResult {
        if query.returnRef {
            throw KeychainError(.unimplemented, "r_Ref: identity references do not cross the socket; ask for r_Attributes and r_Data")
        }
        if query.returnData && !confirmed, identities.contains(where: \.key.secretAsksPerson) {
            throw KeychainError(.interactionNotAllowed, "an identity's key asks the person first, and nobody can be asked here")
        }
        let wanted = [query.returnData, query.returnAttributes, query.returnPersistentRef].filter { $0 }.count
        let single = query.limit.returnsSingle
        guard wanted > 0 else { return single ? .none : .list([]) }
        if wanted == 1 && query.returnData, identities.contains(where: { KeyItem.isSealed($0.key) }) {
            throw KeychainError(.param, "a matching identity's key is not extractable: its bytes never leave keychaind")
        }
        let results = identities.map { identity -> ItemResult in
            let ref = PersistentRef(itemClass: .identity, id: identity.certificate.row.persistentID).bytes
            if wanted == 1 && !query.returnAttributes {
                return query.returnData ? .data(identity.key.data) : .persistentRef(ref)
            }
            var dict: AttributeDictionary = [:]
            if query.returnAttributes {
                dict = identity.key.attributes.merging(identity.certificate.attributes) { _, cert in cert }
                dict["certdata"] = .data(identity.certificate.data)
            }
            if query.returnData && !KeyItem.isSealed(identity.key) { dict["v_Data"] = .data(identity.key.data) }
            if query.returnPersistentRef { dict["v_PersistentRef"] = .data(ref) }
            return .attributes(dict)
        }
        return single ? .single(results[0]) : .list(results)
    }

    /// Deletes the certificates and the private keys of every matching identity.
    func delete(_ query: ItemQuery, groups: [String]) throws(KeychainError) {
        try store.database.transaction { () throws(KeychainError) in
            let identities = try find(query, groups: groups, limit: nil)
            var rows: [Int64: ItemRow] = [:]
            for identity in identities {
                rows[identity.certificate.row.rowid] = identity.certificate.row
                rows[identity.key.row.rowid] = identity.key.row
            }
            for (id, row) in rows.sorted(by: { $0.key < $1.key }) {
                try store.outbox.queue(deleting: row)
                try store.table.delete(rowid: id)
            }
        }
    }

    /// Applies certificate attributes to the certificates, key attributes and v_Data to the
    /// keys, and agrp/pdmn/sync to both, in one transaction.
    func update(_ query: ItemQuery, changesDict: AttributeDictionary, groups: [String], scope: AccessScope,
                allowedByPerson: Set<[UInt8]> = []) throws(KeychainError) {
        let all = try ItemChanges(changesDict, for: .identity)
        var certChanges = ItemChanges()
        var keyChanges = ItemChanges(data: all.data)
        for (code, value) in all.attributes {
            if ["agrp", "pdmn", "sync"].contains(code) {
                certChanges.attributes[code] = value
                keyChanges.attributes[code] = value
            } else if Self.certificateAttributes.contains(code) {
                certChanges.attributes[code] = value
            } else {
                keyChanges.attributes[code] = value
            }
        }
        try store.items.checkChanges(all, scope: scope)
        try store.database.transaction { () throws(KeychainError) in
            let identities = try find(query, groups: groups, limit: nil)
            if !certChanges.isEmpty { try store.items.apply(certChanges, to: identities.map(\.certificate)) }
            if !keyChanges.isEmpty { try store.items.apply(keyChanges, to: uniqueKeys(identities), allowedByPerson: allowedByPerson) }
        }
    }

    private func uniqueKeys(_ identities: [Identity]) -> [StoredItem] {
        var seen: Set<Int64> = []
        return identities.map(\.key).filter { seen.insert($0.row.rowid).inserted }
    }
}
