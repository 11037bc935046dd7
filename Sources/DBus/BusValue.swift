import KeychainModel

/// A D-Bus value: a call's argument, a reply's or signal's member, or one read from a message.
/// Containers carry the signature of what they hold, so that an empty array still has a type.
public indirect enum BusValue: Sendable, Equatable {
    case string(String)
    case objectPath(String)
    case bool(Bool)
    case byte(UInt8)
    case int32(Int32)
    case uint32(UInt32)
    case uint64(UInt64)
    /// `ay` that is not secret.
    case bytes([UInt8])
    /// `ay` that is: copied from wiped memory into the message (sd-bus's buffer is not wiped;
    /// the bus has to carry it anyway).
    case secret(SecretBytes)
    /// `a` of values of signature `element` (a dictionary: `element` "{sv}" and `.entry` values).
    case array(element: String, [BusValue])
    /// A dictionary entry: only inside an `.array`.
    case entry(BusValue, BusValue)
    case structure([BusValue])
    case variant(BusValue)
    /// `h`. Appended: sd-bus sends a duplicate. Read: a duplicate (close-on-exec) that whoever
    /// reads it owns and must close.
    case fileDescriptor(Int32)

    /// The D-Bus signature of this one value.
    public var signature: String {
        switch self {
        case .string: "s"
        case .objectPath: "o"
        case .bool: "b"
        case .byte: "y"
        case .int32: "i"
        case .uint32: "u"
        case .uint64: "t"
        case .bytes, .secret: "ay"
        case .array(let element, _): "a" + element
        case .entry(let key, let value): "{" + key.signature + value.signature + "}"
        case .structure(let members): "(" + members.map(\.signature).joined() + ")"
        case .variant: "v"
        case .fileDescriptor: "h"
        }
    }

    /// Whether this value is or contains a `.secret`.
    public var holdsSecret: Bool {
        switch self {
        case .secret: true
        case .array(_, let elements), .structure(let elements): elements.contains(where: \.holdsSecret)
        case .entry(let key, let value): key.holdsSecret || value.holdsSecret
        case .variant(let inner): inner.holdsSecret
        default: false
        }
    }

    // MARK: Building the usual shapes

    /// `a{ss}`, sorted by name so that the same dictionary is always the same message.
    public static func stringDictionary(_ dictionary: [String: String]) -> BusValue {
        .array(element: "{ss}", dictionary.sorted { $0.key < $1.key }.map { .entry(.string($0.key), .string($0.value)) })
    }

    /// `a{sv}`, sorted by key.
    public static func variantDictionary(_ dictionary: [String: BusValue]) -> BusValue {
        .array(element: "{sv}", dictionary.sorted { $0.key < $1.key }.map { .entry(.string($0.key), .variant($0.value)) })
    }

    /// `ao`.
    public static func objectPaths(_ paths: [String]) -> BusValue {
        .array(element: "o", paths.map { .objectPath($0) })
    }

    // MARK: Reading the usual shapes

    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    public var objectPathValue: String? { if case .objectPath(let p) = self { p } else { nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
    public var uint32Value: UInt32? { if case .uint32(let v) = self { v } else { nil } }
    public var bytesValue: [UInt8]? { if case .bytes(let b) = self { b } else { nil } }
    /// What a variant holds (nil for anything else).
    public var variantContents: BusValue? { if case .variant(let v) = self { v } else { nil } }

    /// An `a{ss}` as a dictionary (nil for anything else; a repeated key keeps its last value).
    public var stringDictionaryValue: [String: String]? {
        guard case .array("{ss}", let entries) = self else { return nil }
        var result: [String: String] = [:]
        for case .entry(.string(let key), .string(let value)) in entries { result[key] = value }
        return result
    }

    /// An `a{sv}` as a dictionary of the variants' contents (nil for anything else).
    public var variantDictionaryValue: [String: BusValue]? {
        guard case .array("{sv}", let entries) = self else { return nil }
        var result: [String: BusValue] = [:]
        for case .entry(.string(let key), .variant(let value)) in entries { result[key] = value }
        return result
    }
}
