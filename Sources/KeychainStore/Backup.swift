import KeychainCrypto
import KeychainModel
import KeychainStorage

/// What a restore did.
public struct RestoreSummary: Sendable, Equatable {
    public var restored = 0
    public var skipped = 0
    public var replaced = 0

    public init(restored: Int = 0, skipped: Int = 0, replaced: Int = 0) {
        self.restored = restored
        self.skipped = skipped
        self.replaced = replaced
    }
}

/// What a backup holds, copied out of the store (one consistent view, under whatever lock
/// serialises the store), to be sealed without it: sealing runs Argon2id.
public struct BackupContents: Sendable {
    let items: [AttributeDictionary]
    /// Items left out: ThisDeviceOnly ones and non-extractable keys.
    public let excluded: Int
    /// Of `excluded`, the non-extractable keys.
    let sealedKeys: Int
    /// How many of `items` ask the person first or are sealed under an application password:
    /// their secrets are in the file too.
    public var asksFirst: Int {
        items.filter { item in
            let flags = AccessControl.storedFlags(item)
            return AccessControl.asksPerson(flags) || AccessControl.needsApplicationPassword(flags)
        }.count
    }
    let parameters: Argon2Parameters

    /// What the backup file says it holds, by class (a count alone reads wrong beside
    /// `keychain list`, which shows passwords only), and what it left out and why.
    var note: String {
        let names = [("genp", "generic password(s)"), ("inet", "internet password(s)"), ("cert", "certificate(s)"), ("keys", "extractable key(s)")]
        let held = names.compactMap { code, name in
            let n = items.filter { $0["class"] == .string(code) }.count
            return n == 0 ? nil : "\(n) \(name)"
        }
        var text = held.isEmpty ? "no items" : held.joined(separator: ", ")
        let deviceOnly = excluded - sealedKeys
        text += deviceOnly == 0 ? "; no ThisDeviceOnly items"
            : "; \(deviceOnly) ThisDeviceOnly item(s) (aku, cku, dku, akpu) left out: they never leave this device"
        if sealedKeys > 0 {
            text += "; \(sealedKeys) non-extractable key(s) left out (the default of key generate and ssh-add): their bytes never leave keychaind, so a certificate restored elsewhere has no key there"
        }
        return text
    }

    /// The backup file: the items encoded (docs/backup-format.md) and sealed under `password`.
    public func seal(password: SecretBytes) throws(KeychainError) -> SealedBackup {
        let file = try BackupFile.seal(payload: BackupPayload.encode(items), itemCount: items.count, excludedCount: excluded,
                                       note: note, password: password, parameters: parameters)
        return SealedBackup(file: file, itemCount: items.count, excluded: excluded, note: note)
    }
}

/// A backup file and what it says it holds.
public struct SealedBackup: Sendable {
    public let file: [UInt8]
    public let itemCount: Int
    public let excluded: Int
    public let note: String
}

/// A backup file opened with its password and checked, ready for `Restorer.restore`.
public struct OpenedBackup: Sendable {
    let items: [AttributeDictionary]
    public let header: BackupFile.Header

    /// Opens `file` (Argon2id: run it without the store's lock). errSecAuthFailed for a wrong
    /// password; errSecDecode for a damaged file or one whose items do not match its header.
    public init(_ file: [UInt8], password: SecretBytes) throws(KeychainError) {
        let (header, payload) = try BackupFile.open(file, password: password)
        let items = try BackupPayload.decode(payload)
        guard items.count == header.itemCount else {
            throw KeychainError(.decode, "the backup holds \(items.count) items but its header says \(header.itemCount)")
        }
        self.items = items
        self.header = header
    }
}

/// What leaves the device in a backup: every item of a migratable class, read under the
/// store's lock and sealed without it.
public struct BackupExporter {
    let store: ItemStore

    /// What a backup of this keychain holds now: every item that may leave the device. Needs
    /// the keychain unlocked.
    public func contents() throws(KeychainError) -> BackupContents {
        let (items, excluded, sealedKeys) = try migratableItems()
        return BackupContents(items: items, excluded: excluded, sealedKeys: sealedKeys, parameters: store.configuration.argon2)
    }

    /// The protection classes whose items may leave this device.
    public static let migratable: [Protection] = [.whenUnlocked, .afterFirstUnlock, .always]

    /// How many items a backup would carry that ask the person first or whose secret an
    /// application password seals, from the blobs' clear headers (no class key needed): a backup
    /// holds their secrets, readable by whoever knows the backup password (a sealed one open to
    /// guessing its password offline, where no delay counts), so making one asks the person as
    /// reading them does.
    public func asksFirstCount() throws(KeychainError) -> Int {
        var count = 0
        for cls in ItemClass.stored {
            for pdmn in Self.migratable {
                try store.table.forEachRow(of: cls, protection: pdmn) { (row) throws(KeychainError) -> Bool in
                    let flags = ItemSealer.accessFlags(of: row.blob)
                    if AccessControl.asksPerson(flags) || AccessControl.needsApplicationPassword(flags) { count += 1 }
                    return true
                }
            }
        }
        return count
    }

    /// Every item that may leave the device (ak, ck, dk), each as one dictionary: `class`, every
    /// attribute (group, protection class and dates included) and `v_Data`; and how many
    /// ThisDeviceOnly items and non-extractable keys were left out (the latter also counted on
    /// their own). Needs the keychain unlocked; altered rows are left out too (they cannot be read).
    public func migratableItems() throws(KeychainError) -> (items: [AttributeDictionary], excluded: Int, sealedKeys: Int) {
        for pdmn in Self.migratable where !store.isAvailable(pdmn) {
            throw KeychainError(.interactionNotAllowed, "the keychain is locked: unlock it before a backup")
        }
        var items: [AttributeDictionary] = []
        var sealedKeys = 0
        let now = store.now()
        for cls in ItemClass.stored {
            for pdmn in Self.migratable {
                let key = try store.classKey(pdmn)
                try store.table.forEachRow(of: cls, protection: pdmn) { (row) throws(KeychainError) -> Bool in
                    guard let item = try? store.codec.open(row, classKey: key, withAttributes: true) else { return true }
                    // An expired item is gone to every read; a backup does not bring it back.
                    if item.isExpired(at: now) { return true }
                    // Not even sealed under the backup password: such a key exists only here.
                    if KeyItem.isSealed(item) {
                        sealedKeys += 1
                        return true
                    }
                    var dict = item.attributes
                    dict["class"] = .string(cls.rawValue)
                    dict["v_Data"] = .data(item.data)
                    items.append(dict)
                    return true
                }
            }
        }
        let counts = try store.table.countByProtection()
        let excluded = Protection.allCases.filter(\.isThisDeviceOnly).reduce(0) { $0 + (counts[$1.rawValue] ?? 0) }
        return (items, excluded + sealedKeys, sealedKeys)
    }
}

/// A backup's items added to the store, all or none.
public struct Restorer {
    let store: ItemStore

    /// Adds a backup's items, all or none (see `importItems`).
    public func restore(_ backup: OpenedBackup, onConflict: ConflictPolicy) throws(KeychainError) -> RestoreSummary {
        try importItems(backup.items, onConflict: onConflict)
    }

    /// Adds the items of a backup, sealed under this device's class keys, in one transaction:
    /// all of them or, on any error (or any conflict under `.fail`), none.
    public func importItems(_ items: [AttributeDictionary], onConflict: ConflictPolicy) throws(KeychainError) -> RestoreSummary {
        try store.database.transaction { () throws(KeychainError) -> RestoreSummary in
            var summary = RestoreSummary()
            var conflicts = 0
            for dict in items {
                let (cls, given, data) = try Self.item(dict)
                var attributes = given
                // A private key is checked as an import is: the key calls trust stored keys.
                // A key sealed under an application password cannot be read here: its bytes are
                // checked when a key call opens them with the password.
                if cls == .key && !AccessControl.needsApplicationPassword(AccessControl.storedFlags(attributes)) {
                    try KeyItem.fill(&attributes, data: data)
                }
                let pdmn = Protection(rawValue: attributes["pdmn"]!.stringValue!)!
                var row = store.codec.seal(cls, attributes: attributes, data: data,
                                           persistentID: PersistentID.make(at: store.now()), classKey: try store.classKey(pdmn))
                do throws(KeychainError) {
                    row.rowid = try store.table.insert(row)
                    try store.outbox.queue(inserted: row)
                    summary.restored += 1
                } catch where error.status == .duplicateItem {
                    conflicts += 1
                    switch onConflict {
                    case .fail: continue  // counted; nothing is kept below
                    case .skip: summary.skipped += 1
                    case .replace:
                        // The same primary key is the same sync record: the restored item is
                        // its next version, not a delete and an add, so it inherits the stamp.
                        if let holder = try store.table.primaryKeyHolder(of: row) {
                            row.replicaStamp = holder.replicaStamp
                            try store.table.delete(rowid: holder.rowid)
                        }
                        row.rowid = try store.table.insert(row)
                        try store.outbox.queue(inserted: row)
                        summary.replaced += 1
                    }
                }
            }
            if onConflict == .fail && conflicts > 0 {
                throw KeychainError(.duplicateItem, "\(conflicts) of the backup's \(items.count) items already exist here; nothing was restored (choose --on-conflict skip or replace)")
            }
            return summary
        }
    }

    /// Checks one backup item: a stored class, a migratable protection class, the common
    /// attributes present, and every attribute one the class has.
    static func item(_ dict: AttributeDictionary) throws(KeychainError) -> (ItemClass, AttributeDictionary, SecretBytes) {
        guard case .string(let code)? = dict["class"], let cls = ItemClass(rawValue: code), let schema = ClassSchema.of(cls) else {
            throw KeychainError(.decode, "a backup item has no valid class")
        }
        guard case .data(let data)? = dict["v_Data"] else { throw KeychainError(.decode, "a backup item has no secret") }
        var attributes = dict
        attributes["class"] = nil
        attributes["v_Data"] = nil
        guard case .string(let p)? = attributes["pdmn"], let pdmn = Protection(rawValue: p), BackupExporter.migratable.contains(pdmn),
              case .string(let agrp)? = attributes["agrp"], !agrp.isEmpty,
              case .int? = attributes["sync"], case .date? = attributes["cdat"], case .date? = attributes["mdat"] else {
            throw KeychainError(.decode, "a backup item lacks its group, protection class or dates")
        }
        if let accc = attributes["accc"] {
            guard let control = try? AccessControl(accc), control.flags != 0, case .string(control.protection.rawValue)? = attributes["pdmn"],
                  (try? control.checkFlags()) != nil else {
                throw KeychainError(.decode, "a backup item has an access control (accc) that does not agree with its protection class")
            }
        }
        for code in attributes.keys where code != "accc" && schema.spec(code) == nil {
            throw KeychainError(.decode, "a backup item has attribute \(code), which class \(cls.rawValue) does not")
        }
        // A Secret Service item's attributes are indexed as they decode: refused whole if not.
        if let xsat = attributes["xsat"] {
            guard case .data(let d) = xsat, (try? SecretServiceAttributes(encoded: Array(d))) != nil else {
                throw KeychainError(.decode, "a backup item has Secret Service attributes (xsat) that do not decode")
            }
        }
        if let xsct = attributes["xsct"] {
            guard case .string(let s) = xsct, s.utf8.count <= 255 else {
                throw KeychainError(.decode, "a backup item has a content type (xsct) that is not a string of at most 255 bytes")
            }
        }
        for spec in schema.primaryKey where attributes[spec.code] == nil {
            attributes[spec.code] = spec.defaultValue
        }
        return (cls, attributes, data)
    }
}

/// The payload of a backup file: u32 item count, then each item as an attribute dictionary
/// (docs/backup-format.md).
public enum BackupPayload {
    public static func encode(_ items: [AttributeDictionary]) -> SecretBytes {
        var w = ByteWriter(capacity: items.count * 256)
        w.u32(UInt32(items.count))
        for item in items { AttributeCodec.encode(item, into: &w) }
        return w.finish()
    }

    public static func decode(_ bytes: SecretBytes) throws(KeychainError) -> [AttributeDictionary] {
        var r = ByteReader(bytes, failure: .decode)
        let count = Int(try r.u32())
        guard count <= bytes.count else { throw KeychainError(.decode, "the backup payload claims \(count) items") }
        var items: [AttributeDictionary] = []
        items.reserveCapacity(count)
        for _ in 0..<count { items.append(try AttributeCodec.decode(from: &r)) }
        guard r.isAtEnd else { throw KeychainError(.decode, "the backup payload has trailing bytes") }
        return items
    }
}
