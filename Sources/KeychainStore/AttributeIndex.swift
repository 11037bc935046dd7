import KeychainCrypto
import KeychainModel
import KeychainStorage

/// The Secret Service items of one store, found and added by their D-Bus attributes
/// (docs/semantics.md, "Secret Service items"): a Secret Service item is a genp item whose
/// svce is "secret-service:<collection>", whose account keychaind sets to the hex of its
/// persistent id, and whose D-Bus attributes are `xsat`, indexed by keyed hashes of each
/// pair and of the whole set.
public struct AttributeIndex {
    let store: ItemStore

    static let secretServicePrefix = "secret-service:"
    /// The keys attributeAdd takes; anything else is refused rather than silently stored.
    private static let attributeAddKeys: Set<String> = ["class", "svce", "xsat", "labl", "xsct", "v_Data", "agrp", "pdmn", "accc", "cdat", "mdat", "gena"]

    /// The Secret Service items of `collection` in the caller's groups holding every pair of
    /// `pairs` (`exact`: exactly that set), as attribute dictionaries: v_PersistentRef, pdmn,
    /// agrp, locked, cdat, mdat. Items of a locked class are listed unopened, marked locked.
    /// Empty when nothing matches.
    public func search(collection: String, exact: Bool, pairs: SecretServiceAttributes,
                                scope: AccessScope) throws(KeychainError) -> [AttributeDictionary] {
        guard SecretServiceNames.isValidCollection(collection) else {
            throw KeychainError(.param, "a collection name is 1 to 64 bytes of a-z, 0-9 and _")
        }
        let svce = Self.secretServicePrefix + collection
        var found: [AttributeDictionary] = []
        if pairs.isEmpty && !exact {
            // Every item of the collection: the svce column's index, nothing to open.
            var filter = RowFilter(itemClass: .genericPassword, accessGroups: scope.groups)
            filter.hashes = [("svce", svceHash(svce))]
            try store.table.forEach(filter) { row in
                found.append(Self.searchRow(row, locked: row.protection.map { !store.isAvailable($0) } ?? false || Self.asksPerson(row)))
                return true
            }
            return found
        }
        var corrupt = 0
        try forEachIndexed(pairs, exact: exact, svce: svce, groups: scope.groups) { (row, item) in
            switch item {
            case .locked: found.append(Self.searchRow(row, locked: true))
            case .opened: found.append(Self.searchRow(row, locked: false))
            case .corrupt: corrupt += 1
            }
            return true
        }
        if found.isEmpty && corrupt > 0 { throw SecItems.nothingFound(corrupt: corrupt) }
        return found
    }

    /// What the index found for one row.
    private enum IndexedItem {
        /// Its class is locked: returned unopened (only its columns are known).
        case locked
        /// Opened, and its xsat matches the query.
        case opened(StoredItem)
        /// It cannot be opened (an altered row).
        case corrupt
    }

    /// The rows the attribute index gives for `pairs` (`exact`: the whole set's hash), in
    /// rowid order. An unlocked row is opened and its xsat checked against the query, since
    /// the index rows are not authenticated: a database editor pointing a hash at another
    /// item must not steer which item an app gets. Rows that fail the check are left out.
    private func forEachIndexed(_ pairs: SecretServiceAttributes, exact: Bool, svce: String, groups: [String],
                                _ body: (ItemRow, IndexedItem) throws(KeychainError) -> Bool) throws(KeychainError) {
        let hashes = exact ? [store.codec.setHash(pairs)] : pairs.pairs.map { store.codec.pairHash(name: $0.name, value: $0.value) }
        var rows: [ItemRow] = []
        try store.table.forEachWithAttributes(hashes, svce: svceHash(svce), groups: groups) { row in
            rows.append(row)
            return true
        }
        for row in rows {
            guard let pdmn = row.protection else {
                guard try body(row, .corrupt) else { return }
                continue
            }
            guard store.isAvailable(pdmn) else {
                guard try body(row, .locked) else { return }
                continue
            }
            let item: StoredItem
            do throws(KeychainError) {
                item = try store.open(row)
            } catch where error.status == .decode {
                guard try body(row, .corrupt) else { return }
                continue
            }
            // The bridge has no prompt and holds no context: an item that asks first, or that
            // an application password seals, is locked to it.
            if item.asksPerson || item.needsApplicationPassword {
                guard try body(row, .locked) else { return }
                continue
            }
            guard let stored = try? Self.secretServiceAttributes(of: item),
                  exact ? stored == pairs : stored.contains(pairs) else { continue }
            guard try body(row, .opened(item)) else { return }
        }
    }

    private func svceHash(_ svce: String) -> [UInt8] {
        store.codec.hash(ClassSchema.genericPassword.spec("svce")!, .string(svce))
    }

    /// Adds a Secret Service item, or with `replace` rewrites the caller's first item (lowest
    /// rowid) of the same collection whose attribute set equals this one: new label, content
    /// type, secret and mdat; its cdat, persistent id, group and class stay. Returns
    /// v_PersistentRef and replaced.
    public func add(_ dict: AttributeDictionary, replace: Bool, scope: AccessScope) throws(KeychainError) -> AttributeDictionary {
        if let key = dict.keys.first(where: { !Self.attributeAddKeys.contains($0) }) {
            throw KeychainError(.param, "attributeAdd does not take \(key); it takes class, svce, xsat, labl, xsct, v_Data, agrp, pdmn, accc, cdat, mdat and gena")
        }
        guard dict["class"] == .string(ItemClass.genericPassword.rawValue) else {
            throw KeychainError(.param, "a Secret Service item is of class genp")
        }
        let query = try ItemQuery(dict, for: .add)
        guard case .string(let svce)? = query.attributes["svce"], svce.hasPrefix(Self.secretServicePrefix),
              SecretServiceNames.isValidCollection(String(svce.dropFirst(Self.secretServicePrefix.count))) else {
            throw KeychainError(.param, "svce must be \"secret-service:\" and a collection name (1 to 64 bytes of a-z, 0-9 and _)")
        }
        guard case .data(let xsat)? = query.attributes["xsat"] else {
            throw KeychainError(.param, "a Secret Service item needs xsat, its attributes")
        }
        let pairs = try SecretServiceAttributes(encoded: Array(xsat))
        return try store.database.transaction { () throws(KeychainError) -> AttributeDictionary in
            if replace, let target = try firstItem(withExactly: pairs, svce: svce, groups: try scope.groups(naming: query.accessGroup)) {
                try rewrite(target, with: query)
                return Self.addResult(target.row, replaced: true)
            }
            let item = try store.items.insert(query, scope: scope, accountFromID: true, keepGivenDates: true)
            return Self.addResult(item.row, replaced: false)
        }
    }

    private static func addResult(_ row: ItemRow, replaced: Bool) -> AttributeDictionary {
        ["v_PersistentRef": .data(PersistentRef(itemClass: row.itemClass, id: row.persistentID).bytes),
         "replaced": .bool(replaced)]
    }

    /// Op 48: for each persistent reference, the Secret Service item's v_PersistentRef, svce,
    /// xsct and v_Data, when it is in the caller's groups and its class is unlocked; others
    /// are left out, as GetSecrets leaves them out. One lookup by persistent id each.
    public func secrets(of refs: [[UInt8]], scope: AccessScope) throws(KeychainError) -> [AttributeDictionary] {
        var found: [AttributeDictionary] = []
        for ref in refs {
            guard let reference = PersistentRef(bytes: ref), reference.itemClass == .genericPassword else { continue }
            var filter = RowFilter(itemClass: .genericPassword, accessGroups: scope.groups)
            filter.persistentID = reference.id
            var match: ItemRow?
            try store.table.forEach(filter) { row in
                match = row
                return false
            }
            // An item that asks first is left out as a locked one is: its secret goes only to a
            // copyMatching the person allowed (the bridge's Unlock prompt makes one); one sealed
            // under an application password goes only to a copyMatching with that password.
            guard let row = match, let pdmn = row.protection, store.isAvailable(pdmn), !Self.asksPerson(row),
                  let item = try? store.open(row), !item.asksPerson, !item.sealedUnderPassword,
                  case .string(let svce)? = item.attributes["svce"],
                  svce.hasPrefix(Self.secretServicePrefix) else { continue }
            found.append(["v_PersistentRef": .data(SecretBytes(ref)), "svce": .string(svce),
                          "xsct": item.attributes["xsct"] ?? .string("text/plain"), "v_Data": .data(item.data)])
        }
        return found
    }

    /// The caller's first item of this collection (lowest rowid) whose set equals `pairs`:
    /// one probe of the set's hash. errSecInteractionNotAllowed when it is of a locked class.
    private func firstItem(withExactly pairs: SecretServiceAttributes, svce: String, groups: [String]) throws(KeychainError) -> StoredItem? {
        var first: StoredItem?
        try forEachIndexed(pairs, exact: true, svce: svce, groups: groups) { (row, item) throws(KeychainError) in
            switch item {
            case .locked:
                throw KeychainError(.interactionNotAllowed, "the item to replace is locked, or asks the person before its secret is read (then delete it and create it again)")
            case .opened(let stored):
                first = stored
                return false
            case .corrupt:
                return true
            }
        }
        return first
    }

    /// Gives `item` the label, content type and secret of `query`, and a new mdat.
    private func rewrite(_ item: StoredItem, with query: ItemQuery) throws(KeychainError) {
        var attributes = item.attributes
        attributes["labl"] = query.attributes["labl"] ?? .string("")
        attributes["xsct"] = query.attributes["xsct"]
        // An import gives the mdat its source had; otherwise mdat strictly increases.
        var mdat = store.now()
        if case .date(let old)? = item.attributes["mdat"], mdat <= old { mdat = old + 0.001 }
        if case .date(let given)? = query.attributes["mdat"] { mdat = given }
        attributes["mdat"] = .date(mdat)
        guard let pdmn = item.row.protection else { throw KeychainError(.decode, "item has an unknown protection class: the row was altered") }
        let row = store.codec.seal(item.itemClass, attributes: attributes, data: query.data ?? .empty,
                                   persistentID: item.row.persistentID, classKey: try store.classKey(pdmn), rowid: item.row.rowid)
        try store.table.replace(row)
        try store.outbox.queue(replaced: item.row, with: row)
        store.noteSecretServiceChange(.changed, row: row, attributes: attributes)
    }

    /// An item's attribute set; an item with no xsat has the empty set.
    static func secretServiceAttributes(of item: StoredItem) throws(KeychainError) -> SecretServiceAttributes {
        guard case .data(let xsat)? = item.attributes["xsat"] else { return try SecretServiceAttributes([:]) }
        do {
            return try SecretServiceAttributes(encoded: Array(xsat))
        } catch {
            throw KeychainError(.decode, "a Secret Service item's attributes cannot be decoded")
        }
    }

    /// Whether the row's sealed header says the item asks the person first (readable without
    /// opening it; an edit of the header leaves a blob that opens for nobody).
    static func asksPerson(_ row: ItemRow) -> Bool { AccessControl.asksPerson(ItemSealer.accessFlags(of: row.blob)) }

    static func searchRow(_ row: ItemRow, locked: Bool) -> AttributeDictionary {
        ["v_PersistentRef": .data(PersistentRef(itemClass: row.itemClass, id: row.persistentID).bytes),
         "pdmn": .string(row.protection?.rawValue ?? ""), "agrp": .string(row.accessGroup),
         "locked": .bool(locked), "cdat": .date(row.created), "mdat": .date(row.modified)]
    }
}

/// The secrets of xdg-desktop-portal's Secret portal: one per sandboxed app, in its own group.
public struct PortalSecrets {
    let store: ItemStore

    /// The access group of a sandboxed app's portal secret: that app's alone (the daemon's
    /// config may not give a `portal.*` group to any application).
    public static func portalGroup(appID: String) -> String { "portal." + appID }
    static let portalService = "org.freedesktop.portal.Secret"
    /// Length of a portal secret, as xdg-desktop-portal's other backends make it.
    static let portalSecretBytes = 64

    /// The portal secret of sandboxed app `appID` (RetrieveSecret): 64 random bytes made on
    /// the first call and kept as a genp item (AfterFirstUnlock) in `portal.<appID>`, in one
    /// transaction, so that two first calls at once cannot make two secrets.
    public func secret(appID: String) throws(KeychainError) -> SecretBytes {
        guard SecretServiceNames.isValidAppID(appID) else {
            throw KeychainError(.param, "an app id is 1 to 255 bytes of A-Z, a-z, 0-9, ., _ and -")
        }
        let scope = AccessScope(groups: [Self.portalGroup(appID: appID)])
        let schema = ClassSchema.genericPassword
        var filter = RowFilter(itemClass: .genericPassword, accessGroups: scope.groups)
        filter.hashes = [("acct", store.codec.hash(schema.spec("acct")!, .string(appID))),
                         ("svce", store.codec.hash(schema.spec("svce")!, .string(Self.portalService)))]
        return try store.database.transaction { () throws(KeychainError) -> SecretBytes in
            var existing: ItemRow?
            try store.table.forEach(filter) { row in
                existing = row
                return false
            }
            if let existing { return try store.open(existing, withAttributes: false).data }
            var query = ItemQuery(itemClass: .genericPassword, attributes: [
                "svce": .string(Self.portalService), "acct": .string(appID),
                "labl": .string("Secret Portal token for \(appID)"), "pdmn": .string(Protection.afterFirstUnlock.rawValue),
            ])
            var fresh = Sodium.randomBytes(Self.portalSecretBytes)
            defer { Sodium.wipe(&fresh) }
            query.data = SecretBytes(fresh)
            return try store.items.insert(query, scope: scope).data
        }
    }
}
