/// Where something starts in a document: 1-based line, and 1-based column counted in
/// Unicode scalars, so that an editor's cursor lands on it.
public struct TOMLPosition: Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    public var description: String { "line \(line), column \(column)" }
}

/// One value of a decoded document together with where it was written.
public struct TOMLValue: Sendable, Equatable {
    public var kind: Kind
    public var position: TOMLPosition

    public init(_ kind: Kind, at position: TOMLPosition) {
        self.kind = kind
        self.position = position
    }

    public indirect enum Kind: Sendable, Equatable {
        case table(TOMLTable)
        case array([TOMLValue])
        case string(String)
        case integer(Int64)
        case float(Double)
        case bool(Bool)
        case offsetDateTime(TOMLOffsetDateTime)
        case localDateTime(TOMLLocalDateTime)
        case localDate(TOMLLocalDate)
        case localTime(TOMLLocalTime)
    }

    /// The TOML name of the value's type, for messages such as "must be a string, not an integer".
    public var typeName: String {
        switch kind {
        case .table: "table"
        case .array: "array"
        case .string: "string"
        case .integer: "integer"
        case .float: "float"
        case .bool: "boolean"
        case .offsetDateTime: "offset date-time"
        case .localDateTime: "local date-time"
        case .localDate: "local date"
        case .localTime: "local time"
        }
    }
}

/// A table's keys in the order the document first names them, each with where its key was written
/// (for a message about the key rather than its value).
public struct TOMLTable: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var key: String
        public var keyPosition: TOMLPosition
        public var value: TOMLValue
    }

    public private(set) var entries: [Entry] = []
    private var indexByKey: [String: Int] = [:]

    public init() {}

    public subscript(key: String) -> TOMLValue? {
        indexByKey[key].map { entries[$0].value }
    }

    public var keys: [String] { entries.map(\.key) }

    /// Adds a key that is not there yet; false (and no change) when it is.
    @discardableResult
    mutating func insert(_ key: String, at keyPosition: TOMLPosition, _ value: TOMLValue) -> Bool {
        guard indexByKey[key] == nil else { return false }
        indexByKey[key] = entries.count
        entries.append(Entry(key: key, keyPosition: keyPosition, value: value))
        return true
    }

    public static func == (a: TOMLTable, b: TOMLTable) -> Bool { a.entries == b.entries }
}

public struct TOMLLocalDate: Sendable, Hashable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    public var description: String { "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))" }
}

public struct TOMLLocalTime: Sendable, Hashable, CustomStringConvertible {
    public var hour: Int
    public var minute: Int
    public var second: Int
    /// The fraction of a second as written, without the dot and without trailing zeros
    /// ("5" for .500): TOML allows more digits than any integer type holds.
    public var fraction: String

    public var description: String {
        "\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))" + (fraction.isEmpty ? "" : "." + fraction)
    }
}

public struct TOMLLocalDateTime: Sendable, Hashable, CustomStringConvertible {
    public var date: TOMLLocalDate
    public var time: TOMLLocalTime

    public var description: String { "\(date)T\(time)" }
}

public struct TOMLOffsetDateTime: Sendable, Hashable, CustomStringConvertible {
    public var dateTime: TOMLLocalDateTime
    /// Minutes east of UTC; `Z` is 0.
    public var offsetMinutes: Int
    /// Whether the document wrote `Z` (kept so that the value prints as written).
    public var isUTC: Bool

    public var description: String {
        if isUTC { return "\(dateTime)Z" }
        let sign = offsetMinutes < 0 ? "-" : "+"
        let m = abs(offsetMinutes)
        return "\(dateTime)\(sign)\(pad(m / 60, 2)):\(pad(m % 60, 2))"
    }
}

private func pad(_ n: Int, _ width: Int) -> String {
    let digits = String(n)
    return String(repeating: "0", count: max(0, width - digits.count)) + digits
}

/// Why a document was refused, and where.
public struct TOMLError: Error, Sendable, Equatable, CustomStringConvertible {
    public var position: TOMLPosition
    public var message: String

    public init(_ message: String, at position: TOMLPosition) {
        self.message = message
        self.position = position
    }

    public var line: Int { position.line }
    public var column: Int { position.column }
    public var description: String { "line \(position.line), column \(position.column): \(message)" }
}
