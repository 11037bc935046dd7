import KeychainCrypto
import KeychainModel
import KeychainStorage

/// An item opened from its row: the secret and, when they were asked for, every attribute
/// (defaults included).
struct StoredItem: Sendable {
    var row: ItemRow
    var attributes: AttributeDictionary
    var data: SecretBytes
    /// The item's expiry (CFAbsoluteTime), read even when its attributes were not asked for.
    var expiry: Double? = nil
    /// `data` is still the application-password layer (ApplicationPasswordSeal), not the
    /// secret: never an answer.
    var sealedUnderPassword = false

    var itemClass: ItemClass { row.itemClass }

    /// Past its expiry at `now`: never returned, and deleted by the sweep.
    func isExpired(at now: Double) -> Bool { expiry.map { $0 <= now } ?? false }

    /// The expiry `attributes` hold, if any.
    static func expiry(in attributes: AttributeDictionary) -> Double? {
        if case .date(let t)? = attributes[ClassSchema.expiry] { return t }
        return nil
    }

    /// The access-control constraint flags sealed with the item (authenticated once opened).
    var accessFlags: UInt32 { ItemSealer.accessFlags(of: row.blob) }

    /// Whether its secret is handed out only after the person said so (docs/security.md,
    /// "Items that ask first").
    var asksPerson: Bool { AccessControl.asksPerson(accessFlags) }

    /// Whether handing out its secret needs the person's yes. A non-extractable key's bytes
    /// never leave keychaind, so a read of it asks nothing; its use does (the key calls).
    var secretAsksPerson: Bool { asksPerson && !KeyItem.isSealed(self) }
    /// Whether its secret is sealed under the application password too (docs/security.md,
    /// "The application password").
    var needsApplicationPassword: Bool { AccessControl.needsApplicationPassword(accessFlags) }
    /// Whether handing out its secret needs the application password: a non-extractable key's
    /// sealed bytes are never handed out, so a read of it needs none (its use does).
    var secretSealedUnderPassword: Bool { sealedUnderPassword && !KeyItem.isSealed(self) }
}

/// The 16 bytes behind a persistent reference: the creation time in milliseconds since 2001
/// (6 bytes, big-endian), then 10 random bytes. Later ids sort later, so a new row's entry
/// lands at the end of the persistref index rather than on a random page that its commit
/// must write (the reasoning of UUIDv7); the 80 random bits keep ids distinct.
enum PersistentID {
    static func make(at time: Double) -> [UInt8] {
        let ms = UInt64(max(0, min(time * 1000, Double(UInt64(1) << 47))))
        var id = (0..<6).map { UInt8(truncatingIfNeeded: ms >> (8 * (5 - UInt64($0)))) }
        id += Sodium.randomBytes(10)
        return id
    }

    /// The id as lowercase hex: a Secret Service item's account and D-Bus path element.
    static func hex(_ id: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(id.count * 2)
        for byte in id {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// What turns attributes into rows and rows back into attributes: the keyed hashes, the
/// associated data that binds a blob to its row, and the sealing itself.
struct ItemCodec {
    let hasher: LookupHasher

    /// The keyed hash of a coerced attribute value, as its column holds it. A number in a blob
    /// attribute hashes under a domain of its own, so no string or data can share its hash.
    func hash(_ spec: AttributeSpec, _ value: AttributeValue) -> [UInt8] {
        switch spec.matchKey(value) {
        case .bytes(let bytes):
            return hasher.hash(attribute: spec.code, bytes: bytes)
        case .blobNumber(let n):
            return hasher.hash(attribute: spec.code + "#number", bytes: withUnsafeBytes(of: n.littleEndian) { Array($0) })
        }
    }

    /// The hash keychaind wrote before schema version 4 (a blob number as its decimal text).
    func legacyHash(_ spec: AttributeSpec, _ value: AttributeValue) -> [UInt8] {
        hasher.hash(attribute: spec.code, bytes: spec.legacyMatchBytes(value))
    }

    /// The hashed columns of an item with these (complete, coerced) attributes.
    func hashes(of cls: ItemClass, _ attributes: AttributeDictionary, legacy: Bool = false) -> [String: [UInt8]] {
        var out: [String: [UInt8]] = [:]
        for spec in ClassSchema.of(cls)!.columnAttributes {
            if let v = attributes[spec.code] { out[spec.code] = legacy ? legacyHash(spec, v) : hash(spec, v) }
        }
        return out
    }

    /// The attribute index rows of an item with these attributes: one per Secret Service
    /// pair and one for the whole set; nil for an item without xsat (or one that does not
    /// decode, which ItemQuery refuses before any item is sealed).
    func attributeIndexHashes(_ cls: ItemClass, _ attributes: AttributeDictionary) -> [[UInt8]]? {
        guard cls == .genericPassword, case .data(let xsat)? = attributes["xsat"],
              let set = try? SecretServiceAttributes(encoded: Array(xsat)) else { return nil }
        return set.pairs.map { pairHash(name: $0.name, value: $0.value) } + [setHash(set)]
    }

    /// The index hash of one (name, value) pair: the name's length first, so that no other
    /// split of the same bytes gives the same message.
    func pairHash(name: String, value: String) -> [UInt8] {
        var message: [UInt8] = []
        message.reserveCapacity(4 + name.utf8.count + value.utf8.count)
        withUnsafeBytes(of: UInt32(name.utf8.count).littleEndian) { message += $0 }
        message += name.utf8
        message += value.utf8
        return hasher.hash(secretServiceDomain: "ss-pair", message: message)
    }

    /// The index hash of a whole set (its canonical encoding).
    func setHash(_ set: SecretServiceAttributes) -> [UInt8] {
        hasher.hash(secretServiceDomain: "ss-set", message: set.encoded)
    }

    /// Whether one of `specs` is a blob attribute holding a number: the one value whose hash
    /// changed with schema version 4.
    static func hasBlobNumber(_ attributes: AttributeDictionary, among specs: [AttributeSpec]) -> Bool {
        specs.contains { spec in
            if spec.kind == .blob, case .int? = attributes[spec.code] { return true }
            return false
        }
    }

    /// The row identity that both encryption layers authenticate: format, class, pdmn, agrp,
    /// sync, persistent id and every lookup column.
    func identity(of row: ItemRow) -> [UInt8] {
        var w = ByteWriter(capacity: 64 + row.accessGroup.utf8.count + 20 * row.hashes.count)
        w.lengthPrefixed(row.itemClass.rawValue.utf8)
        w.lengthPrefixed((row.protection?.rawValue ?? "").utf8)
        w.lengthPrefixed(row.accessGroup.utf8)
        w.u64(UInt64(bitPattern: row.sync))
        w.lengthPrefixed(row.persistentID)
        for spec in ClassSchema.of(row.itemClass)!.columnAttributes {
            if let h = row.hashes[spec.code] {
                w.u8(1)
                w.lengthPrefixed(h)
            } else {
                w.u8(0)
            }
        }
        return w.bytes
    }

    /// Builds the row for `attributes` (which must hold agrp, pdmn, sync, cdat, mdat) and seals it.
    func seal(_ cls: ItemClass, attributes: AttributeDictionary, data: SecretBytes, persistentID: [UInt8],
              classKey: SecureKey, rowid: Int64 = 0) -> ItemRow {
        guard case .string(let agrp)? = attributes["agrp"],
              case .string(let pdmnText)? = attributes["pdmn"], let pdmn = Protection(rawValue: pdmnText),
              case .int(let sync)? = attributes["sync"],
              case .date(let cdat)? = attributes["cdat"], case .date(let mdat)? = attributes["mdat"] else {
            preconditionFailure("sealing an item without its common attributes")
        }
        var row = ItemRow(itemClass: cls, persistentID: persistentID, accessGroup: agrp, protection: pdmn,
                          sync: sync, created: cdat, modified: mdat, hashes: hashes(of: cls, attributes), blob: [])
        row.rowid = rowid
        row.attributeHashes = attributeIndexHashes(cls, attributes)
        return seal(row, attributes: attributes, data: data, classKey: classKey)
    }

    /// Seals `attributes` and `data` into `row`, whose columns are already set: the blob
    /// authenticates them as they are.
    func seal(_ row: ItemRow, attributes: AttributeDictionary, data: SecretBytes, classKey: SecureKey) -> ItemRow {
        var row = row
        // Secret first, then the attributes, so that a read of the secret alone need not
        // decode the attributes.
        var w = ByteWriter(capacity: 4 + data.count + 256)
        w.lengthPrefixed(data)
        AttributeCodec.encode(attributes, into: &w)
        // The writer's own wiped buffer is sealed: no copy of the plaintext is ever made.
        row.blob = ItemSealer.seal(w.finish(), identity: identity(of: row), classKey: classKey,
                                   accessFlags: AccessControl.storedFlags(attributes))
        return row
    }

    /// Opens a row with its class key; errSecDecode if anything about it was altered. The
    /// attributes are returned only when asked for (`attributes` is empty otherwise).
    func open(_ row: ItemRow, classKey: SecureKey, withAttributes: Bool) throws(KeychainError) -> StoredItem {
        let plaintext = try ItemSealer.open(row.blob, identity: identity(of: row), classKey: classKey)
        var r = ByteReader(plaintext, failure: .decode)
        let data = try r.lengthPrefixed(max: KeychainLimits.maxSecretBytes)
        // Decoded even when not asked for: whether the item has expired is in them.
        let attributes = try AttributeCodec.decode(from: &r)
        guard r.isAtEnd else { throw KeychainError(.decode, "item has trailing bytes") }
        guard AccessControl.storedFlags(attributes) == ItemSealer.accessFlags(of: row.blob) else {
            throw KeychainError(.decode, "item's access control does not match its sealed constraint")
        }
        return StoredItem(row: row, attributes: withAttributes ? attributes : [:], data: data,
                          expiry: StoredItem.expiry(in: attributes),
                          sealedUnderPassword: AccessControl.needsApplicationPassword(ItemSealer.accessFlags(of: row.blob)))
    }
}
