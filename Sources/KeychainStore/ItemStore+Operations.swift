import KeychainCrypto
import KeychainModel
import KeychainStorage

extension ItemStore {
    // MARK: SecItemAdd

    /// Adds one item. errSecDuplicateItem when its primary key is taken (unless the holder is
    /// an altered row, which the new item replaces, as securityd does). Returns the result the
    /// return keys ask for, in CopyMatching's single-item shape.
    @discardableResult
    public func add(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> QueryResult {
        let query = try ItemQuery(dict, for: .add)
        let cls = query.itemClass
        if query.returnRef && cls != .genericPassword && cls != .internetPassword {
            throw KeychainError(.unimplemented, "r_Ref: object references do not cross the socket; ask for r_Data or r_Attributes")
        }
        let item = try insert(query, scope: scope)
        return try result(for: [item], query: query, single: true)
    }

    /// Adds the item `query` describes, in the caller's group. `accountFromID`: its account
    /// is the hex of its persistent id (a Secret Service item's, which keychaind names), so
    /// that its primary key never clashes.
    func insert(_ query: ItemQuery, scope: AccessScope, accountFromID: Bool = false) throws(KeychainError) -> StoredItem {
        let cls = query.itemClass
        var attributes = query.attributes
        let agrp = try query.accessGroup.map { (g) throws(KeychainError) in try scope.groups(naming: g)[0] }
            ?? scope.defaultGroup
        guard let agrp else { throw KeychainError(.missingEntitlement, "the caller has no access groups") }
        let pdmn = query.protection ?? cls.defaultProtection
        let key = try classKey(pdmn)
        if cls == .certificate { try CertificateItem.derive(&attributes, data: query.data) }
        // Before the primary key's defaults (bsiz 0, klbl empty): a key's derived attributes
        // are checked against what the caller gave, nothing else.
        if cls == .key { try KeyItem.fill(&attributes, data: query.data) }
        let schema = ClassSchema.of(cls)!
        for spec in schema.primaryKey where attributes[spec.code] == nil {
            attributes[spec.code] = spec.defaultValue
        }
        let stamp = now()
        attributes["agrp"] = .string(agrp)
        attributes["pdmn"] = .string(pdmn.rawValue)
        attributes["sync"] = attributes["sync"] ?? .int(0)
        attributes["cdat"] = .date(stamp)
        attributes["mdat"] = .date(stamp)
        let data = query.data ?? .empty
        let id = PersistentID.make(at: stamp)
        if accountFromID { attributes["acct"] = .string(PersistentID.hex(id)) }
        var row = codec.seal(cls, attributes: attributes, data: data, persistentID: id, classKey: key)
        row.rowid = try database.transaction { () throws(KeychainError) -> Int64 in
            try checkNoLegacyHolder(of: row, attributes: attributes)
            var inserted = row
            inserted.rowid = try insertReplacingCorrupt(row)
            try queueReplicaChange(inserted: inserted)
            return inserted.rowid
        }
        return StoredItem(row: row, attributes: attributes, data: data)
    }

    /// Inserts, or on a primary-key clash replaces the holder if it is an altered row.
    private func insertReplacingCorrupt(_ row: ItemRow) throws(KeychainError) -> Int64 {
        do throws(KeychainError) {
            return try table.insert(row)
        } catch where error.status == .duplicateItem {
            try removeCorruptHolder(of: row)
            return try table.insert(row)
        }
    }

    /// Deletes the row holding `row`'s primary key if it cannot be decrypted; otherwise
    /// errSecDuplicateItem. An altered row leaves no sync tombstone: its blob opens for nobody,
    /// and the new row's version supersedes its record.
    private func removeCorruptHolder(of row: ItemRow) throws(KeychainError) {
        let duplicate = KeychainError(.duplicateItem, "an item with the same primary key already exists in group \"\(row.accessGroup)\"")
        guard let holder = try table.primaryKeyHolder(of: row) else { throw duplicate }
        do throws(KeychainError) {
            _ = try open(holder, withAttributes: false)
        } catch where error.status == .decode {
            try table.delete(rowid: holder.rowid)
            return
        } catch {}
        throw duplicate
    }

    // MARK: SecItemCopyMatching

    /// The split read's one CopyMatching, with the whole answer gathered.
    public func copyMatching(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> QueryResult {
        var results: [ItemResult] = []
        let answer = try splitReader.copyMatching(dict, scope: scope, store: self) { (page) throws(KeychainError) in results += page }
        guard case .list = answer else { return answer }
        return .list(results)
    }

    func result(for items: [StoredItem], query: ItemQuery, single: Bool) throws(KeychainError) -> QueryResult {
        try Self.result(for: items, query: query, single: single)
    }

    /// The result shapes of keychain-semantics.md 4.6 (static: a split read shapes off the lock).
    static func result(for items: [StoredItem], query: ItemQuery, single: Bool) throws(KeychainError) -> QueryResult {
        let wanted = [query.returnData, query.returnAttributes, query.returnPersistentRef].filter { $0 }.count
        guard wanted > 0 else { return single ? .none : .list([]) }
        // A non-extractable key's bytes are never an answer: left out of a dictionary, and a
        // call that asks for nothing but data is refused (docs/keys.md).
        if wanted == 1 && query.returnData, items.contains(where: KeyItem.isSealed) {
            throw KeychainError(.param, "a matching key is not extractable: its bytes never leave keychaind (ask for r_Attributes, or use the key calls)")
        }
        let results = items.map { item -> ItemResult in
            let ref = PersistentRef(itemClass: item.itemClass, id: item.row.persistentID).bytes
            if wanted == 1 && !query.returnAttributes {
                return query.returnData ? .data(item.data) : .persistentRef(ref)
            }
            var dict = query.returnAttributes ? item.attributes : [:]
            if query.returnData && !KeyItem.isSealed(item) { dict["v_Data"] = .data(item.data) }
            if query.returnPersistentRef { dict["v_PersistentRef"] = .data(ref) }
            return .attributes(dict)
        }
        return single ? .single(results[0]) : .list(results)
    }

    // MARK: SecItemUpdate

    /// Changes every item the query matches, all in one transaction: a primary-key clash on
    /// any of them (errSecDuplicateItem) or a locked class leaves every item as it was.
    public func update(_ queryDict: AttributeDictionary, changes changesDict: AttributeDictionary, scope: AccessScope) throws(KeychainError) {
        let query = try ItemQuery(queryDict, for: .update)
        let groups = try scope.groups(naming: query.accessGroup)
        if query.itemClass == .identity {
            try Identities(store: self).update(query, changesDict: changesDict, groups: groups, scope: scope)
            return
        }
        let changes = try ItemChanges(changesDict, for: query.itemClass)
        try checkChanges(changes, scope: scope)
        let plan = plan(query.itemClass, attributes: query.attributes, groups: groups, query: query)
        try database.transaction { () throws(KeychainError) in
            let (items, corrupt) = try find(plan, limit: nil, withAttributes: true)
            guard !items.isEmpty else { throw Self.nothingFound(corrupt: corrupt) }
            try apply(changes, to: items)
        }
    }

    /// The new group must be the caller's; the new class key must be loaded.
    func checkChanges(_ changes: ItemChanges, scope: AccessScope) throws(KeychainError) {
        if let agrp = changes.attributes["agrp"]?.stringValue { _ = try scope.groups(naming: agrp) }
        if let pdmn = changes.attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)) {
            _ = try classKey(pdmn)
        }
    }

    /// Rewrites each item with the changes: new attributes, secret and mdat, resealed under a
    /// fresh item key and the class key of its (possibly new) protection domain. An item left
    /// synchronizable and ThisDeviceOnly is errSecParam. The caller holds the transaction.
    func apply(_ changes: ItemChanges, to items: [StoredItem]) throws(KeychainError) {
        let stamp = now()
        for item in items {
            try KeyItem.checkChange(item, changes)
            var attributes = item.attributes
            if item.itemClass == .certificate {
                attributes = try CertificateItem.updated(attributes, changes: changes, currentData: item.data)
            } else {
                attributes.merge(changes.attributes) { _, new in new }
            }
            try ItemQuery.checkSynchronizable(attributes)
            // mdat strictly increases, even if the clock did not move.
            var mdat = stamp
            if case .date(let old)? = item.attributes["mdat"], mdat <= old { mdat = old + 0.001 }
            attributes["mdat"] = .date(mdat)
            let pdmn = attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)) ?? .whenUnlocked
            let row = codec.seal(item.itemClass, attributes: attributes, data: changes.data ?? item.data,
                                 persistentID: item.row.persistentID, classKey: try classKey(pdmn),
                                 rowid: item.row.rowid)
            try checkNoLegacyHolder(of: row, attributes: attributes)
            do throws(KeychainError) {
                try table.replace(row)
            } catch where error.status == .duplicateItem {
                try removeCorruptHolder(of: row)
                try table.replace(row)
            }
            try queueReplicaChange(replaced: item.row, with: row)
        }
    }

    // MARK: SecItemDelete

    /// Deletes every match. Rows are selected by their columns, so items of a locked class can
    /// be deleted (as on iOS) unless the query names an attribute that only the sealed item holds.
    public func delete(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) {
        let query = try ItemQuery(dict, for: .delete)
        let groups = try scope.groups(naming: query.accessGroup)
        if query.itemClass == .identity {
            try Identities(store: self).delete(query, groups: groups)
            return
        }
        let plan = plan(query.itemClass, attributes: query.attributes, groups: groups, query: query)
        try database.transaction { () throws(KeychainError) in
            guard plan.needsOpening else {
                // Every condition is a column: SQLite finds and deletes the rows in one statement.
                try queueReplicaChange(deletingRowsOf: plan.filter)
                guard try table.deleteRows(plan.filter) > 0 else { throw Self.nothingFound(corrupt: 0) }
                return
            }
            let (items, corrupt) = try find(plan, limit: nil, withAttributes: true)
            guard !items.isEmpty else { throw Self.nothingFound(corrupt: corrupt) }
            for item in items {
                try queueReplicaChange(deleting: item.row)
                try table.delete(rowid: item.row.rowid)
            }
        }
    }
}
