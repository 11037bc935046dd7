import KeychainCrypto
import KeychainModel
import KeychainStorage

/// SecItem's calls over one store: add, copyMatching, update and delete, and the search they
/// share. Each writing call runs in one transaction of the store's database and queues its
/// change for replicas in it; the caller holds the store as its one owner (the daemon's store
/// lock), as for every type over the store.
public struct SecItems {
    let store: ItemStore

    // MARK: SecItemAdd

    /// Adds one item. errSecDuplicateItem when its primary key is taken (unless the holder is
    /// an altered row, which the new item replaces, as securityd does). Returns the result the
    /// return keys ask for, in CopyMatching's single-item shape.
    /// `sealedSecret`: the secret already sealed under the application password given with
    /// the call (ApplicationPasswordSeal, made by the daemon outside its lock), for an item
    /// whose accc holds applicationPassword; without it such an item is refused.
    @discardableResult
    public func add(_ dict: AttributeDictionary, scope: AccessScope, sealedSecret: SecretBytes? = nil) throws(KeychainError) -> QueryResult {
        let query = try ItemQuery(dict, for: .add)
        let cls = query.itemClass
        if query.returnRef && cls != .genericPassword && cls != .internetPassword {
            throw KeychainError(.unimplemented, "r_Ref: object references do not cross the socket; ask for r_Data or r_Attributes")
        }
        let item = try insert(query, scope: scope, sealedSecret: sealedSecret)
        // The caller has just given the secret: returning it asks nobody.
        return try result(for: [item], query: query, single: true, confirmed: true)
    }

    /// Adds the item `query` describes, in the caller's group. `accountFromID`: its account
    /// is the hex of its persistent id (a Secret Service item's, which keychaind names), so
    /// that its primary key never clashes.
    /// `keepGivenDates`: a cdat and mdat in the query are kept (an import's, from the store it
    /// reads), not replaced by now.
    func insert(_ query: ItemQuery, scope: AccessScope, accountFromID: Bool = false,
                keepGivenDates: Bool = false, sealedSecret: SecretBytes? = nil) throws(KeychainError) -> StoredItem {
        let cls = query.itemClass
        var attributes = query.attributes
        let agrp = try query.accessGroup.map { (g) throws(KeychainError) in try scope.groups(naming: g)[0] }
            ?? scope.defaultGroup
        guard let agrp else { throw KeychainError(.missingEntitlement, "the caller has no access groups") }
        let pdmn = query.protection ?? cls.defaultProtection
        let key = try store.classKey(pdmn)
        if cls == .certificate { try CertificateItem.derive(&attributes, data: query.data) }
        // Before the primary key's defaults (bsiz 0, klbl empty): a key's derived attributes
        // are checked against what the caller gave, nothing else.
        if cls == .key { try KeyItem.fill(&attributes, data: query.data) }
        let schema = ClassSchema.of(cls)!
        for spec in schema.primaryKey where attributes[spec.code] == nil {
            attributes[spec.code] = spec.defaultValue
        }
        let stamp = store.now()
        attributes["agrp"] = .string(agrp)
        attributes["pdmn"] = .string(pdmn.rawValue)
        attributes["sync"] = attributes["sync"] ?? .int(0)
        attributes["cdat"] = keepGivenDates ? query.attributes["cdat"] ?? .date(stamp) : .date(stamp)
        attributes["mdat"] = keepGivenDates ? query.attributes["mdat"] ?? attributes["cdat"] : .date(stamp)
        let data = query.data ?? .empty
        let stored = try Self.storedSecret(data, sealed: sealedSecret, flags: AccessControl.storedFlags(attributes))
        let id = PersistentID.make(at: stamp)
        if accountFromID { attributes["acct"] = .string(PersistentID.hex(id)) }
        var row = store.codec.seal(cls, attributes: attributes, data: stored, persistentID: id, classKey: key)
        row.rowid = try store.database.transaction { () throws(KeychainError) -> Int64 in
            try store.legacyNumbers.checkNoHolder(of: row, attributes: attributes)
            var inserted = row
            inserted.rowid = try insertReplacingCorrupt(row)
            try store.outbox.queue(inserted: inserted)
            store.noteSecretServiceChange(.created, row: inserted, attributes: attributes)
            return inserted.rowid
        }
        return StoredItem(row: row, attributes: attributes, data: data, expiry: StoredItem.expiry(in: attributes))
    }

    /// What the row holds in place of `secret`: its application-password layer for an item
    /// with that flag (none given: errSecInteractionNotAllowed), the secret itself otherwise.
    static func storedSecret(_ secret: SecretBytes, sealed: SecretBytes?, flags: UInt32) throws(KeychainError) -> SecretBytes {
        guard AccessControl.needsApplicationPassword(flags) else { return secret }
        guard let sealed else { throw noApplicationPassword }
        guard sealed.count <= KeychainLimits.maxSecretBytes else {
            throw .param("the secret of an item with an application password is at most \(KeychainLimits.maxSecretBytes - ApplicationPasswordSeal.overhead) bytes")
        }
        return sealed
    }

    /// An item with an application password, read, added or changed without one. As when an
    /// item asks the person and nobody can be asked: keychaind has no dialog for it.
    public static let noApplicationPassword = KeychainError(.interactionNotAllowed, "the item's secret is sealed under an application password (accc flag 2147483648), and the call carries none: give it to an authentication context (contextSetCredential) and send the context's u_CredRef")

    /// Inserts, or on a primary-key clash replaces the holder if it is an altered or expired row.
    private func insertReplacingCorrupt(_ row: ItemRow) throws(KeychainError) -> Int64 {
        do throws(KeychainError) {
            return try store.table.insert(row)
        } catch where error.status == .duplicateItem {
            try removeCorruptHolder(of: row)
            return try store.table.insert(row)
        }
    }

    /// Deletes the row holding `row`'s primary key if it cannot be decrypted or has expired;
    /// otherwise errSecDuplicateItem. An expired holder is one no read returns, so an add must
    /// not be refused for it (a token renewed after its expiry is added again, as it reads
    /// as absent); its deletion goes to replicas as the sweep's would. An altered row leaves
    /// no sync tombstone: its blob opens for nobody, and the new row's version supersedes its record.
    private func removeCorruptHolder(of row: ItemRow) throws(KeychainError) {
        let duplicate = KeychainError(.duplicateItem, "an item with the same primary key already exists in group \"\(row.accessGroup)\"")
        guard let holder = try store.table.primaryKeyHolder(of: row) else { throw duplicate }
        let opened: StoredItem
        do throws(KeychainError) {
            opened = try store.open(holder, withAttributes: false)
        } catch where error.status == .decode {
            try store.table.delete(rowid: holder.rowid)
            return
        } catch {
            throw duplicate
        }
        guard opened.isExpired(at: store.now()) else { throw duplicate }
        try store.outbox.queue(deleting: holder)
        try store.table.delete(rowid: holder.rowid)
    }

    // MARK: SecItemCopyMatching

    /// The split read's one CopyMatching, with the whole answer gathered.
    public func copyMatching(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> QueryResult {
        var results: [ItemResult] = []
        let answer = try store.splitReader.copyMatching(dict, scope: scope, store: store) { (page) throws(KeychainError) in results += page }
        guard case .list = answer else { return answer }
        return .list(results)
    }

    func result(for items: [StoredItem], query: ItemQuery, single: Bool, confirmed: Bool = false) throws(KeychainError) -> QueryResult {
        try Self.result(for: items, query: query, single: single, confirmed: confirmed)
    }

    /// The result shapes of keychain-semantics.md 4.6 (static: a split read shapes off the lock).
    /// `confirmed`: the person allowed this call to read secrets of items that ask first;
    /// without it such a secret is never an answer, whoever calls.
    static func result(for items: [StoredItem], query: ItemQuery, single: Bool, confirmed: Bool = false) throws(KeychainError) -> QueryResult {
        let wanted = [query.returnData, query.returnAttributes, query.returnPersistentRef].filter { $0 }.count
        guard wanted > 0 else { return single ? .none : .list([]) }
        if query.returnData && !confirmed, items.contains(where: \.secretAsksPerson) {
            throw KeychainError(.interactionNotAllowed, "this item's secret is read only after the person at the machine types the keychain passcode, and nobody can be asked here")
        }
        // Whoever calls: the application-password layer is never an answer.
        if query.returnData, items.contains(where: \.secretSealedUnderPassword) { throw noApplicationPassword }
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
    /// `sealedSecret`: the new secret sealed under the call's application password, for the
    /// matches whose accc holds applicationPassword (as `add`'s).
    /// `allowedByPerson`: the persistent ids of the items that ask first which the person
    /// allowed this update to change (`updateQuestion`, asked outside the store's lock); a
    /// match that asks first and is not among them is errSecInteractionNotAllowed.
    public func update(_ queryDict: AttributeDictionary, changes changesDict: AttributeDictionary, scope: AccessScope,
                       sealedSecret: SecretBytes? = nil, allowedByPerson: Set<[UInt8]> = []) throws(KeychainError) {
        let query = try ItemQuery(queryDict, for: .update)
        let groups = try scope.groups(naming: query.accessGroup)
        if query.itemClass == .identity {
            try Identities(store: store).update(query, changesDict: changesDict, groups: groups, scope: scope,
                                                allowedByPerson: allowedByPerson)
            return
        }
        let changes = try ItemChanges(changesDict, for: query.itemClass)
        try checkChanges(changes, scope: scope)
        let plan = plan(query.itemClass, attributes: query.attributes, groups: groups, query: query)
        try store.database.transaction { () throws(KeychainError) in
            let (items, corrupt) = try find(plan, limit: nil, withAttributes: true)
            guard !items.isEmpty else { throw Self.nothingFound(corrupt: corrupt) }
            try apply(changes, to: items, sealedSecret: sealedSecret, allowedByPerson: allowedByPerson)
        }
    }

    /// What the person must allow before an update of `queryDict` runs: the matches that ask
    /// first (userPresence or devicePasscode), nil when none does. Only rows whose sealed
    /// header says they ask are opened, so an update of plain items pays one lookup.
    /// Securityd copies every attribute of the old item into the new one, secret included, so
    /// any update of such an item needs its constraint satisfied, not only one of the secret.
    /// An update the store would refuse for such an item anyway (a key's bytes, sync = 1 beside
    /// a constraint) is refused here, before anybody is asked.
    public func updateQuestion(_ queryDict: AttributeDictionary, changes changesDict: AttributeDictionary,
                               scope: AccessScope) throws(KeychainError) -> UpdateQuestion? {
        let query = try ItemQuery(queryDict, for: .update)
        let groups = try scope.groups(naming: query.accessGroup)
        let changes = try ItemChanges(changesDict, for: query.itemClass)
        var asking: [StoredItem] = []
        if query.itemClass == .identity {
            asking = try Identities(store: store).find(query, groups: groups, limit: nil).map(\.key).filter(\.asksPerson)
        } else {
            let plan = plan(query.itemClass, attributes: query.attributes, groups: groups, query: query)
            let now = store.now()
            try store.table.forEach(plan.filter) { (row) throws(KeychainError) -> Bool in
                guard AccessControl.asksPerson(ItemSealer.accessFlags(of: row.blob)) else { return true }
                if let item = try? store.open(row, withAttributes: true), plan.matches(item), !item.isExpired(at: now) {
                    asking.append(item)
                }
                return true
            }
            for item in asking { _ = try updatedAttributes(item, changes) }
        }
        guard let first = asking.first else { return nil }
        return UpdateQuestion(items: Set(asking.map(\.row.persistentID)), label: first.attributes["labl"]?.stringValue,
                              reason: query.operationPrompt, mayAsk: query.authenticationUI != .fail,
                              keychainPasscode: asking.contains { AccessControl.needsKeychainPasscode($0.accessFlags) })
    }

    /// The new group must be the caller's; the new class key must be loaded.
    func checkChanges(_ changes: ItemChanges, scope: AccessScope) throws(KeychainError) {
        if let agrp = changes.attributes["agrp"]?.stringValue { _ = try scope.groups(naming: agrp) }
        if let pdmn = changes.attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)) {
            _ = try store.classKey(pdmn)
        }
    }

    /// Rewrites each item with the changes: new attributes, secret and mdat, resealed under a
    /// fresh item key and the class key of its (possibly new) protection domain. An item left
    /// synchronizable and ThisDeviceOnly is errSecParam. The caller holds the transaction.
    func apply(_ changes: ItemChanges, to items: [StoredItem], sealedSecret: SecretBytes? = nil,
               allowedByPerson: Set<[UInt8]> = []) throws(KeychainError) {
        let stamp = store.now()
        for item in items {
            // By persistent id: the person's yes was for these items, found before the lock was
            // taken again; one that matches only now (added meanwhile) was never asked for.
            if item.asksPerson && !allowedByPerson.contains(item.row.persistentID) {
                throw KeychainError(.interactionNotAllowed, "the update would change an item that asks the person first, and the person was not asked for it (it matched after the question): run the update again")
            }
            var attributes = try updatedAttributes(item, changes)
            let pdmn = attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)) ?? .whenUnlocked
            // mdat strictly increases, even if the clock did not move.
            var mdat = stamp
            if case .date(let old)? = item.attributes["mdat"], mdat <= old { mdat = old + 0.001 }
            attributes["mdat"] = .date(mdat)
            // An item with an application password keeps its sealed layer, or takes the new
            // secret sealed under the call's password.
            let data = try changes.data.map { (new) throws(KeychainError) in
                try Self.storedSecret(new, sealed: sealedSecret, flags: item.accessFlags)
            } ?? item.data
            let row = store.codec.seal(item.itemClass, attributes: attributes, data: data,
                                 persistentID: item.row.persistentID, classKey: try store.classKey(pdmn),
                                 rowid: item.row.rowid)
            try store.legacyNumbers.checkNoHolder(of: row, attributes: attributes)
            do throws(KeychainError) {
                try store.table.replace(row)
            } catch where error.status == .duplicateItem {
                try removeCorruptHolder(of: row)
                try store.table.replace(row)
            }
            try store.outbox.queue(replaced: item.row, with: row)
            if item.attributes["svce"] != attributes["svce"] {
                store.noteSecretServiceChange(.deleted, row: item.row, attributes: item.attributes)
                store.noteSecretServiceChange(.created, row: row, attributes: attributes)
            } else {
                store.noteSecretServiceChange(.changed, row: row, attributes: attributes)
            }
        }
    }

    /// `item`'s attributes with `changes` applied and checked (mdat aside): what may not change
    /// of a key, the constraint (`constrain`), sync beside a constraint or ThisDeviceOnly.
    func updatedAttributes(_ item: StoredItem, _ changes: ItemChanges) throws(KeychainError) -> AttributeDictionary {
        try KeyItem.checkChange(item, changes)
        var attributes = item.attributes
        if item.itemClass == .certificate {
            attributes = try CertificateItem.updated(attributes, changes: changes, currentData: item.data)
        } else {
            attributes.merge(changes.attributes) { _, new in new }
        }
        let pdmn = attributes["pdmn"]?.stringValue.flatMap(Protection.init(rawValue:)) ?? .whenUnlocked
        try Self.constrain(&attributes, item: item, changes: changes, protection: pdmn)
        try ItemQuery.checkSynchronizable(attributes)
        return attributes
    }

    /// The updated item's `accc`: an update without accc keeps the item's constraint under its
    /// (possibly new) protection class, so no pdmn change drops it; an update with accc
    /// replaces it, as securityd's copy of the item takes the new access control (for an item
    /// that asks first, only once the person allowed the update). The application password
    /// is in the stored secret, not a question: adding or removing it would need the secret
    /// opened and sealed again, which an update does not do.
    static func constrain(_ attributes: inout AttributeDictionary, item: StoredItem, changes: ItemChanges,
                          protection: Protection) throws(KeychainError) {
        let flags = changes.accessControl?.flags ?? item.accessFlags
        if AccessControl.needsApplicationPassword(flags) != AccessControl.needsApplicationPassword(item.accessFlags) {
            throw KeychainError(.unimplemented, "an update cannot add or remove the application password (accc flag 2147483648): delete the item and add it again")
        }
        attributes["accc"] = flags == 0 ? nil : .string(AccessControl(protection: protection, flags: flags).stored)
    }

    // MARK: SecItemDelete

    /// Deletes every match. Rows are selected by their columns, so items of a locked class can
    /// be deleted (as on iOS) unless the query names an attribute that only the sealed item holds.
    public func delete(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) {
        let query = try ItemQuery(dict, for: .delete)
        let groups = try scope.groups(naming: query.accessGroup)
        if query.itemClass == .identity {
            try Identities(store: store).delete(query, groups: groups)
            return
        }
        let plan = plan(query.itemClass, attributes: query.attributes, groups: groups, query: query)
        try store.database.transaction { () throws(KeychainError) in
            guard plan.needsOpening else {
                // Every condition is a column: SQLite finds and deletes the rows in one statement.
                try store.outbox.queue(deletingRowsOf: plan.filter)
                try store.noteSecretServiceDeletes(plan.filter)
                guard try store.table.deleteRows(plan.filter) > 0 else { throw Self.nothingFound(corrupt: 0) }
                return
            }
            // Expired items match a delete: they are gone to every read, and deleting them
            // early only does the sweep's work (the column-only path above deletes them too).
            let (items, corrupt) = try find(plan, limit: nil, withAttributes: true, includingExpired: true)
            guard !items.isEmpty else { throw Self.nothingFound(corrupt: corrupt) }
            for item in items {
                try store.outbox.queue(deleting: item.row)
                try store.table.delete(rowid: item.row.rowid)
                store.noteSecretServiceChange(.deleted, row: item.row, attributes: item.attributes)
            }
        }
    }

    // MARK: the search the calls share

    /// Builds the plan for `attributes` (coerced query attributes of class `cls`) within `groups`.
    func plan(_ cls: ItemClass, attributes: AttributeDictionary, groups: [String], query: ItemQuery) -> SearchPlan {
        Self.plan(cls, attributes: attributes, groups: groups, query: query, codec: store.codec)
    }

    /// `plan` with the codec given: it needs nothing else, so a split read plans off the lock.
    static func plan(_ cls: ItemClass, attributes: AttributeDictionary, groups: [String], query: ItemQuery,
                     codec: ItemCodec) -> SearchPlan {
        let schema = ClassSchema.of(cls)!
        var filter = RowFilter(itemClass: cls, accessGroups: groups)
        var checks: [(AttributeSpec, AttributeValue)] = []
        // Absent sync means sync = 0 (Apple): nothing synchronizable unless asked; "syna" and a
        // persistent reference lift the filter.
        if case .int(let s)? = attributes["sync"] {
            filter.sync = s
        } else if !query.matchesAnySync && query.persistentRef == nil {
            filter.sync = 0
        }
        filter.persistentID = query.persistentRef?.id
        for (code, value) in attributes {
            guard let spec = schema.spec(code) else { continue }
            switch code {
            case "agrp", "sync": continue  // groups and sync are filtered above
            case "pdmn": filter.protection = value.stringValue.flatMap(Protection.init(rawValue:))
            default:
                if spec.hasColumn {
                    filter.hashes.append((code, codec.hash(spec, value)))
                } else {
                    checks.append((spec, value))
                }
            }
        }
        return SearchPlan(filter: filter, checks: checks)
    }

    /// Opens and checks the rows a plan selects, up to `limit` matches. A row of a locked class
    /// fails the whole call (errSecInteractionNotAllowed, as on iOS); an altered row is skipped
    /// and reported in `corrupt`. An expired item matches nothing but a delete.
    func find(_ plan: SearchPlan, limit: Int?, withAttributes: Bool,
              includingExpired: Bool = false) throws(KeychainError) -> (items: [StoredItem], corrupt: Int) {
        var items: [StoredItem] = []
        var corrupt = 0
        let now = store.now()
        let decode = withAttributes || plan.needsOpening
        try store.table.forEach(plan.filter) { (row) throws(KeychainError) -> Bool in
            let item: StoredItem
            do throws(KeychainError) {
                item = try store.open(row, withAttributes: decode)
            } catch where error.status == .decode {
                corrupt += 1
                return true
            }
            if plan.matches(item) && (includingExpired || !item.isExpired(at: now)) { items.append(item) }
            return limit.map { items.count < $0 } ?? true
        }
        return (items, corrupt)
    }

    /// errSecItemNotFound, or errSecDecode when the only candidates were altered rows.
    public static func nothingFound(corrupt: Int) -> KeychainError {
        corrupt > 0
            ? KeychainError(.decode, "the matching item cannot be decrypted: its row in the database was altered")
            : KeychainError(.itemNotFound, "no item matches the query")
    }

    // MARK: expiry

    /// Deletes every expired item of the classes whose keys are loaded (the others wait for
    /// their unlock: their expiry is sealed with them), each deletion queued for replicas as a
    /// delete. Returns how many went. One transaction: the daemon runs it under its store lock.
    public func sweepExpired() throws(KeychainError) -> Int {
        let now = store.now()
        return try store.database.transaction { () throws(KeychainError) -> Int in
            var expired: [ItemRow] = []
            for cls in ItemClass.stored {
                for pdmn in Protection.allCases where store.isAvailable(pdmn) {
                    let key = try store.classKey(pdmn)
                    try store.table.forEachRow(of: cls, protection: pdmn) { (row) throws(KeychainError) -> Bool in
                        if let item = try? store.codec.open(row, classKey: key, withAttributes: false), item.isExpired(at: now) {
                            expired.append(row)
                        }
                        return true
                    }
                }
            }
            for row in expired {
                try store.outbox.queue(deleting: row)
                try store.table.delete(rowid: row.rowid)
            }
            return expired.count
        }
    }
}
