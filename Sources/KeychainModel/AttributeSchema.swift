/// How an attribute's value is coerced and compared (keychain-semantics.md 1.2).
public enum AttributeKind: Sendable, Hashable {
    /// String, data or number; keeps the type it was given; a string and data with the same
    /// bytes match, a number matches only the same number.
    case blob
    /// Bytes; a string is taken as its UTF-8 bytes.
    case data
    /// Text; data must be valid UTF-8.
    case string
    /// Integer; booleans become 0/1, a decimal string becomes a number, any other string stays
    /// a string (so kSecAttrProtocol "htps" is kept as text, as Apple does).
    case number
    /// CFAbsoluteTime.
    case date
}

/// One attribute of one class.
public struct AttributeSpec: Sendable, Hashable {
    public let code: String
    public let kind: AttributeKind
    /// Part of the class's primary key (a clash is errSecDuplicateItem).
    public let isPrimaryKey: Bool
    /// Has a lookup column (a keyed hash) in the items table; other attributes live only in
    /// the sealed blob and are matched after decryption.
    public let hasColumn: Bool

    init(_ code: String, _ kind: AttributeKind, primaryKey: Bool = false, column: Bool = false) {
        self.code = code
        self.kind = kind
        self.isPrimaryKey = primaryKey
        self.hasColumn = primaryKey || column
    }

    /// The value a missing primary-key attribute takes before the uniqueness check.
    public var defaultValue: AttributeValue {
        switch kind {
        case .blob, .string: .string("")
        case .data: .data([])
        case .number: .int(0)
        case .date: .date(0)
        }
    }
}

/// The attributes of each class, Apple's codes and kinds (keychain-semantics.md 1.3 to 1.8),
/// less Apple's sync, token and multi-user internals that have no meaning on one Linux host.
/// A class (not a struct) so that handing one around costs one retain, not one per table:
/// every query and every row opened looks its schema up.
public final class ClassSchema: Sendable {
    public let itemClass: ItemClass
    /// Class-specific attributes, primary-key ones first in primary-key order.
    public let attributes: [AttributeSpec]
    private let byCode: [String: AttributeSpec]

    /// Class-specific primary-key attributes (the common ones, agrp and sync, are columns of
    /// their own).
    public let primaryKey: [AttributeSpec]
    /// Attributes with a hashed lookup column, in a fixed order.
    public let columnAttributes: [AttributeSpec]

    init(_ itemClass: ItemClass, _ attributes: [AttributeSpec]) {
        self.itemClass = itemClass
        self.attributes = attributes
        var map: [String: AttributeSpec] = [:]
        for spec in ClassSchema.common + attributes { map[spec.code] = spec }
        self.byCode = map
        // Stored, not computed: every query and every row opened needs them.
        primaryKey = attributes.filter(\.isPrimaryKey)
        columnAttributes = (ClassSchema.common + attributes).filter {
            $0.hasColumn && !ClassSchema.plainColumns.contains($0.code)
        }
    }

    public func spec(_ code: String) -> AttributeSpec? { byCode[code] }

    /// Attributes every stored class has. agrp, pdmn, sync, cdat and mdat are plain columns
    /// (the daemon filters and picks class keys by them); labl is a hashed column.
    static let common: [AttributeSpec] = [
        .init("cdat", .date),
        .init("mdat", .date),
        .init("labl", .blob, column: true),
        .init("agrp", .string),
        .init("pdmn", .string),
        .init("sync", .number),
        // keychaind's own (docs/semantics.md, "Expiry"): past it the item is never returned
        // and the sweep deletes it. Only in the sealed blob: no column, so the database does
        // not show when a token dies.
        .init("expd", .date),
    ]

    /// The expiry attribute's code.
    public static let expiry = "expd"

    /// Attributes kept in clear columns rather than as keyed hashes.
    public static let plainColumns: Set<String> = ["cdat", "mdat", "agrp", "pdmn", "sync"]

    /// Attribute codes shared by genp and inet.
    private static let passwordCommon: [AttributeSpec] = [
        .init("desc", .blob), .init("icmt", .blob), .init("crtr", .number), .init("type", .number),
        .init("scrp", .number), .init("alis", .blob), .init("invi", .number), .init("nega", .number),
        .init("cusi", .number), .init("prot", .blob),
    ]

    public static let genericPassword = ClassSchema(.genericPassword, [
        .init("acct", .blob, primaryKey: true),
        .init("svce", .blob, primaryKey: true),
        .init("gena", .blob),
        // keychaind's own, for Secret Service items (docs/semantics.md): the item's attribute
        // set in its canonical encoding (SecretServiceAttributes), and its content type.
        .init("xsat", .data),
        .init("xsct", .string),
    ] + passwordCommon)

    public static let internetPassword = ClassSchema(.internetPassword, [
        .init("acct", .blob, primaryKey: true),
        .init("sdmn", .blob, primaryKey: true),
        .init("srvr", .blob, primaryKey: true),
        .init("ptcl", .number, primaryKey: true),
        .init("atyp", .blob, primaryKey: true),
        .init("port", .number, primaryKey: true),
        .init("path", .blob, primaryKey: true),
    ] + passwordCommon)

    public static let certificate = ClassSchema(.certificate, [
        .init("ctyp", .number, primaryKey: true),
        .init("issr", .data, primaryKey: true),
        .init("slnr", .data, primaryKey: true),
        .init("cenc", .number),
        .init("alis", .blob, column: true),
        .init("subj", .data, column: true),
        .init("skid", .data, column: true),
        .init("pkhh", .data, column: true),
        // keychaind's own: SHA-256 of the SubjectPublicKeyInfo, derived on add. No lookup
        // column (that would change the items table); certificates are Always-class items,
        // so a query by spkh opens them and compares.
        .init("spkh", .data),
    ])

    public static let key = ClassSchema(.key, [
        .init("kcls", .number, primaryKey: true),
        .init("klbl", .data, primaryKey: true),
        .init("atag", .blob, primaryKey: true),
        .init("type", .number, primaryKey: true),
        .init("crtr", .number, primaryKey: true),
        .init("bsiz", .number, primaryKey: true),
        .init("esiz", .number, primaryKey: true),
        .init("sdat", .date, primaryKey: true),
        .init("edat", .date, primaryKey: true),
        .init("alis", .blob),
        .init("perm", .number), .init("priv", .number), .init("modi", .number),
        .init("sens", .number), .init("asen", .number), .init("extr", .number), .init("next", .number),
        .init("encr", .number), .init("decr", .number), .init("drve", .number), .init("sign", .number),
        .init("vrfy", .number), .init("snrc", .number), .init("vyrc", .number), .init("wrap", .number),
        .init("unwp", .number),
        // keychaind's own: the public key of a key sealed under an application password,
        // derived on add (its private bytes open only with the password).
        .init("xpub", .data),
    ])

    public static func of(_ itemClass: ItemClass) -> ClassSchema? {
        switch itemClass {
        case .genericPassword: genericPassword
        case .internetPassword: internetPassword
        case .certificate: certificate
        case .key: key
        case .identity: nil
        }
    }

    /// Every hashed column of the items table, across classes, in a fixed order. Codes that two
    /// classes share (acct, type, crtr, alis) share a column.
    public static let allHashedColumns: [String] = {
        var seen: Set<String> = []
        var out: [String] = []
        for schema in [genericPassword, internetPassword, certificate, key] {
            for spec in schema.columnAttributes where seen.insert(spec.code).inserted {
                out.append(spec.code)
            }
        }
        return out
    }()
}

extension AttributeSpec {
    /// Turns a caller's value into the stored form of this attribute, or says why it cannot.
    public func coerce(_ value: AttributeValue) throws(KeychainError) -> AttributeValue {
        func wrongType() -> KeychainError {
            .param("attribute \(code) does not take a \(value.typeName) value")
        }
        switch kind {
        case .blob:
            // Apple's blob kind converts strings, data and numbers only: a CFBoolean is not a
            // CFNumber there, so a boolean is refused rather than stored as 0 or 1.
            switch value {
            case .string, .data, .int: return value
            case .bool, .date: throw .param("attribute \(code) takes a string, data or a number, not a \(value.typeName)")
            }
        case .data:
            // Apple: a number becomes its 4-byte integer.
            if case .int(let i) = value {
                return .data(withUnsafeBytes(of: Int32(truncatingIfNeeded: i).littleEndian) { Array($0) })
            }
            guard let bytes = value.bytesValue else { throw wrongType() }
            return .data(bytes)
        case .string:
            switch value {
            case .string: return value
            case .data(let d):
                guard let s = String(validating: d, as: UTF8.self) else {
                    throw .param("attribute \(code) is not valid UTF-8")
                }
                return .string(s)
            default: throw wrongType()
            }
        case .number:
            switch value {
            case .int: return value
            case .bool(let b): return .int(b ? 1 : 0)
            case .string(let s):
                if let n = Int64(decimal: s) { return .int(n) }
                return value
            case .data, .date: throw wrongType()
            }
        case .date:
            guard case .date(let t) = value, t.isFinite else { throw wrongType() }
            return value
        }
    }

    /// What equality of this attribute compares and what its lookup column hashes. A string
    /// and data with the same bytes are equal (as in Apple's hashed columns); a number in a
    /// blob attribute is its own value, equal to no string or data; number attributes compare
    /// by value (a decimal string was made a number by `coerce`).
    public func matchKey(_ stored: AttributeValue) -> MatchKey {
        if kind == .blob, case .int(let i) = stored { return .blobNumber(i) }
        return .bytes(plainMatchBytes(stored))
    }

    /// The bytes keychaind hashed before schema version 4 for every value: a number in a blob
    /// attribute as its decimal text, so that acct 42 and acct "42" shared a column value.
    /// Only the upgrade of old rows uses it.
    public func legacyMatchBytes(_ stored: AttributeValue) -> [UInt8] { plainMatchBytes(stored) }

    private func plainMatchBytes(_ stored: AttributeValue) -> [UInt8] {
        switch stored {
        case .string(let s): return Array(s.utf8)
        case .data(let d): return Array(d)  // lookup attributes, never v_Data
        case .int(let i): return Array(String(i).utf8)
        case .bool(let b): return Array((b ? "1" : "0").utf8)
        case .date(let t): return withUnsafeBytes(of: t.bitPattern.littleEndian) { Array($0) }
        }
    }
}

/// One attribute value as equality sees it (`AttributeSpec.matchKey`).
public enum MatchKey: Sendable, Hashable {
    /// Strings and data by their bytes; number and date attributes by a canonical encoding.
    case bytes([UInt8])
    /// A number held by a blob attribute (acct, svce, labl...).
    case blobNumber(Int64)
}

extension Int64 {
    /// Apple's rule: a string that is exactly a decimal integer becomes a number.
    init?(decimal s: String) {
        guard !s.isEmpty, s.utf8.count <= 20 else { return nil }
        var digits = Substring(s)
        if digits.first == "-" { digits = digits.dropFirst() }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        guard let n = Int64(s) else { return nil }
        self = n
    }
}
