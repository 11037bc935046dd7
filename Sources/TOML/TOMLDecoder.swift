/// Reads a TOML 1.0.0 document into a tree of values that remember where they were written.
public enum TOMLDecoder {
    /// Deepest nesting of tables and arrays: the reader and everything that walks the tree
    /// recurse, so a hostile document must not choose the depth.
    public static let maxDepth = 128
    /// Largest document read (a config file is a few kilobytes).
    public static let maxBytes = 16 << 20

    public static func decode(_ text: String) throws(TOMLError) -> TOMLTable {
        try decode(utf8: Array(text.utf8))
    }

    /// Bytes from a file: they are checked to be UTF-8 first.
    public static func decode(utf8 bytes: [UInt8]) throws(TOMLError) -> TOMLTable {
        guard bytes.count <= maxBytes else {
            throw TOMLError("the document is larger than \(maxBytes >> 20) MiB", at: TOMLPosition(line: 1, column: 1))
        }
        var reader = DocumentReader(bytes)
        try reader.checkUTF8()
        return try reader.document()
    }
}

private enum ASCII {
    static let tab: UInt8 = 0x09, lf: UInt8 = 0x0A, cr: UInt8 = 0x0D, space: UInt8 = 0x20
    static let quote: UInt8 = 0x22, hash: UInt8 = 0x23, apostrophe: UInt8 = 0x27, plus: UInt8 = 0x2B
    static let comma: UInt8 = 0x2C, minus: UInt8 = 0x2D, dot: UInt8 = 0x2E, colon: UInt8 = 0x3A
    static let equals: UInt8 = 0x3D, openBracket: UInt8 = 0x5B, backslash: UInt8 = 0x5C
    static let closeBracket: UInt8 = 0x5D, underscore: UInt8 = 0x5F, openBrace: UInt8 = 0x7B
    static let closeBrace: UInt8 = 0x7D, del: UInt8 = 0x7F

    static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }
    /// Control characters TOML refuses in strings and comments: all but tab.
    static func isForbiddenControl(_ c: UInt8) -> Bool { (c < 0x20 && c != tab) || c == del }
}

private struct DocumentReader {
    let bytes: [UInt8]
    var index = 0
    var line = 1
    var lineStart = 0
    /// The last column worked out, so that positions along a long line cost no rescans.
    var columnMark = (index: 0, column: 1)

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    // MARK: Positions and errors

    var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

    func peek(_ offset: Int) -> UInt8? {
        index + offset < bytes.count ? bytes[index + offset] : nil
    }

    mutating func position(at i: Int) -> TOMLPosition {
        if columnMark.index < lineStart || columnMark.index > i { columnMark = (lineStart, 1) }
        var column = columnMark.column
        var j = columnMark.index
        while j < i {
            if bytes[j] & 0xC0 != 0x80 { column += 1 }
            j += 1
        }
        columnMark = (i, column)
        return TOMLPosition(line: line, column: column)
    }

    mutating func here() -> TOMLPosition { position(at: index) }

    mutating func error(_ message: String) -> TOMLError { TOMLError(message, at: here()) }

    /// What is at the reader, for messages: a character, never more (values may be secrets).
    var found: String {
        guard let c = peek else { return "the end of the document" }
        switch c {
        case ASCII.lf, ASCII.cr: return "the end of the line"
        case 0x21...0x7E: return "`\(Character(Unicode.Scalar(c)))`"
        default: return c < 0x80 ? "character U+\(hex(UInt32(c)))" : "a non-ASCII character"
        }
    }

    // MARK: Encoding

    /// Well-formed UTF-8: no stray continuation bytes, overlong forms, surrogates or code
    /// points past U+10FFFF. The position of a bad byte is reported with its line.
    mutating func checkUTF8() throws(TOMLError) {
        var i = 0
        while i < bytes.count {
            let c = bytes[i]
            if c == ASCII.lf {
                line += 1
                lineStart = i + 1
            }
            if c < 0x80 { i += 1; continue }
            let length: Int, low: UInt8, high: UInt8
            switch c {
            case 0xC2...0xDF: (length, low, high) = (2, 0x80, 0xBF)
            case 0xE0: (length, low, high) = (3, 0xA0, 0xBF)
            case 0xED: (length, low, high) = (3, 0x80, 0x9F)
            case 0xE1...0xEF: (length, low, high) = (3, 0x80, 0xBF)
            case 0xF0: (length, low, high) = (4, 0x90, 0xBF)
            case 0xF4: (length, low, high) = (4, 0x80, 0x8F)
            case 0xF1...0xF3: (length, low, high) = (4, 0x80, 0xBF)
            default: throw TOMLError(Self.notUTF8(c), at: position(at: i))
            }
            guard i + length <= bytes.count, bytes[i + 1] >= low, bytes[i + 1] <= high,
                  bytes[(i + 2)..<(i + length)].allSatisfy({ $0 & 0xC0 == 0x80 }) else {
                throw TOMLError(Self.notUTF8(c), at: position(at: i))
            }
            i += length
        }
        line = 1
        lineStart = 0
        columnMark = (0, 1)
    }

    /// Names the byte that starts the bad sequence: a config saved as Latin-1 shows which
    /// character to retype.
    static func notUTF8(_ byte: UInt8) -> String {
        let hex = String(byte, radix: 16, uppercase: true)
        return "invalid UTF-8 (byte 0x\(hex.count == 1 ? "0" + hex : hex)): the file must be UTF-8"
    }

    // MARK: Lines, whitespace, comments

    mutating func skipWhitespace() {
        while let c = peek, c == ASCII.space || c == ASCII.tab { index += 1 }
    }

    var atNewline: Bool { peek == ASCII.lf || peek == ASCII.cr }

    mutating func newline() throws(TOMLError) {
        if peek == ASCII.cr {
            guard peek(1) == ASCII.lf else { throw error("a carriage return must be followed by a line feed") }
            index += 1
        }
        index += 1
        line += 1
        lineStart = index
    }

    mutating func comment() throws(TOMLError) {
        index += 1
        while let c = peek, c != ASCII.lf {
            if c == ASCII.cr && peek(1) == ASCII.lf { return }
            if ASCII.isForbiddenControl(c) { throw error("control character U+\(hex(UInt32(c))) in a comment") }
            index += 1
        }
    }

    /// The rest of a line after a header or `key = value`: blanks and a comment, then the line ends.
    mutating func endOfLine() throws(TOMLError) {
        skipWhitespace()
        if peek == ASCII.hash { try comment() }
        guard let _ = peek else { return }
        guard atNewline else { throw error("expected the end of the line, found \(found)") }
        try newline()
    }

    /// Inside an array, values may be spread over lines with comments between them.
    mutating func skipBlankLinesAndComments() throws(TOMLError) {
        while true {
            skipWhitespace()
            if peek == ASCII.hash { try comment() }
            guard atNewline else { return }
            try newline()
        }
    }

    // MARK: Document

    mutating func document() throws(TOMLError) -> TOMLTable {
        let root = TableNode(origin: .header, at: TOMLPosition(line: 1, column: 1), depth: 0)
        var current = root
        while true {
            skipWhitespace()
            guard let c = peek else { break }
            switch c {
            case ASCII.hash, ASCII.lf, ASCII.cr:
                try endOfLine()
            case ASCII.openBracket:
                current = try header(in: root)
                try endOfLine()
            default:
                try keyValue(into: current, depth: current.depth)
                try endOfLine()
            }
        }
        return root.value
    }

    mutating func header(in root: TableNode) throws(TOMLError) -> TableNode {
        let start = here()
        index += 1
        let isArray = peek == ASCII.openBracket
        if isArray { index += 1 }
        let path = try key()
        guard peek == ASCII.closeBracket else { throw error("expected `]` to close the table header, found \(found)") }
        index += 1
        if isArray {
            guard peek == ASCII.closeBracket else { throw error("expected `]]` to close the array-of-tables header") }
            index += 1
            return try root.appendTable(path, header: start)
        }
        return try root.defineTable(path, header: start)
    }

    mutating func keyValue(into table: TableNode, depth: Int) throws(TOMLError) {
        let path = try key()
        guard peek == ASCII.equals else {
            throw error("expected `=` after the key (each line is `key = value`), found \(found)")
        }
        index += 1
        skipWhitespace()
        let value = try value(depth: depth + path.count)
        try table.assign(path, value)
    }

    // MARK: Keys

    /// A key, dotted or not, with the blanks around it.
    mutating func key() throws(TOMLError) -> [KeyPart] {
        var parts: [KeyPart] = []
        while true {
            skipWhitespace()
            let start = here()
            let name: String
            switch peek {
            case ASCII.quote?: name = try basicString()
            case ASCII.apostrophe?: name = try literalString()
            default:
                let first = index
                while let c = peek, isBareKeyByte(c) { index += 1 }
                guard index > first else { throw error("expected a key, found \(found)") }
                name = String(decoding: bytes[first..<index], as: UTF8.self)
            }
            parts.append(KeyPart(name: name, position: start))
            skipWhitespace()
            guard peek == ASCII.dot else { return parts }
            index += 1
        }
    }

    // MARK: Values

    mutating func value(depth: Int) throws(TOMLError) -> TOMLValue {
        let start = here()
        guard depth < TOMLDecoder.maxDepth else {
            throw error("values are nested more than \(TOMLDecoder.maxDepth) deep")
        }
        switch peek {
        case ASCII.quote?:
            let multiline = peek(1) == ASCII.quote && peek(2) == ASCII.quote
            return TOMLValue(.string(multiline ? try multilineBasicString() : try basicString()), at: start)
        case ASCII.apostrophe?:
            let multiline = peek(1) == ASCII.apostrophe && peek(2) == ASCII.apostrophe
            return TOMLValue(.string(multiline ? try multilineLiteralString() : try literalString()), at: start)
        case ASCII.openBracket?:
            return TOMLValue(.array(try array(depth: depth + 1)), at: start)
        case ASCII.openBrace?:
            return TOMLValue(.table(try inlineTable(depth: depth + 1, at: start)), at: start)
        case 0x74?, 0x66?:  // t, f
            if matches("true") { index += 4; return TOMLValue(.bool(true), at: start) }
            if matches("false") { index += 5; return TOMLValue(.bool(false), at: start) }
            throw error("expected a value, found \(found)")
        case let c? where ASCII.isDigit(c) || c == ASCII.plus || c == ASCII.minus || c == 0x69 || c == 0x6E:  // i, n
            if isDateAhead { return TOMLValue(try dateTime(), at: start) }
            if isTimeAhead { return TOMLValue(.localTime(try time()), at: start) }
            return TOMLValue(try number(), at: start)
        default:
            throw error("expected a value, found \(found)")
        }
    }

    func matches(_ word: String) -> Bool {
        var i = index
        for c in word.utf8 {
            guard i < bytes.count, bytes[i] == c else { return false }
            i += 1
        }
        return true
    }

    mutating func array(depth: Int) throws(TOMLError) -> [TOMLValue] {
        index += 1
        var items: [TOMLValue] = []
        while true {
            try skipBlankLinesAndComments()
            if peek == ASCII.closeBracket { break }
            items.append(try value(depth: depth))
            try skipBlankLinesAndComments()
            if peek == ASCII.comma {
                index += 1
                continue
            }
            guard peek == ASCII.closeBracket else {
                throw error("expected `,` or `]` in the array, found \(found)")
            }
            break
        }
        index += 1
        return items
    }

    /// `{ a = 1, b.c = 2 }`: on one line, no trailing comma, and closed to later additions
    /// (its keys become a value, which the table tree never extends).
    mutating func inlineTable(depth: Int, at start: TOMLPosition) throws(TOMLError) -> TOMLTable {
        index += 1
        let table = TableNode(origin: .dotted, at: start, depth: depth)
        skipWhitespace()
        if peek == ASCII.closeBrace {
            index += 1
            return table.value
        }
        while true {
            guard !atNewline else { throw error("an inline table must be on one line") }
            try keyValue(into: table, depth: depth)
            skipWhitespace()
            if peek == ASCII.comma {
                index += 1
                skipWhitespace()
                if peek == ASCII.closeBrace { throw error("no comma is allowed after the last key of an inline table") }
                continue
            }
            guard peek == ASCII.closeBrace else {
                throw error(atNewline ? "an inline table must be on one line" : "expected `,` or `}` in the inline table, found \(found)")
            }
            index += 1
            return table.value
        }
    }

    // MARK: Strings

    /// `"…"`, reader on the opening quote.
    mutating func basicString() throws(TOMLError) -> String {
        index += 1
        var out: [UInt8] = []
        while true {
            guard let c = peek else { throw error("unterminated string") }
            switch c {
            case ASCII.quote:
                index += 1
                return String(decoding: out, as: UTF8.self)
            case ASCII.backslash:
                try escape(into: &out)
            case ASCII.lf, ASCII.cr:
                throw error("unterminated string (a string in \"…\" ends on its line; \"\"\"…\"\"\" spans lines)")
            default:
                if ASCII.isForbiddenControl(c) { throw error("control character U+\(hex(UInt32(c))) in a string; escape it") }
                out.append(c)
                index += 1
            }
        }
    }

    /// `'…'`: no escapes.
    mutating func literalString() throws(TOMLError) -> String {
        index += 1
        let first = index
        while true {
            guard let c = peek else { throw error("unterminated string") }
            if c == ASCII.apostrophe { break }
            if c == ASCII.lf || c == ASCII.cr { throw error("unterminated string (a string in '…' ends on its line)") }
            if ASCII.isForbiddenControl(c) { throw error("control character U+\(hex(UInt32(c))) in a string") }
            index += 1
        }
        defer { index += 1 }
        return String(decoding: bytes[first..<index], as: UTF8.self)
    }

    /// `"""…"""`: a newline right after the opening quotes is dropped, a backslash at the end of
    /// a line drops the line break and the blanks that follow, and up to two quotes may end it.
    mutating func multilineBasicString() throws(TOMLError) -> String {
        try multilineString(quote: ASCII.quote) { (reader, out) throws(TOMLError) in
            var i = reader.index + 1
            while i < reader.bytes.count, reader.bytes[i] == ASCII.space || reader.bytes[i] == ASCII.tab { i += 1 }
            guard i < reader.bytes.count, reader.bytes[i] == ASCII.lf || reader.bytes[i] == ASCII.cr else {
                try reader.escape(into: &out)
                return
            }
            reader.index = i
            while true {
                reader.skipWhitespace()
                guard reader.atNewline else { return }
                try reader.newline()
            }
        }
    }

    mutating func multilineLiteralString() throws(TOMLError) -> String {
        try multilineString(quote: ASCII.apostrophe, backslash: nil)
    }

    mutating func multilineString(
        quote: UInt8, backslash: ((inout DocumentReader, inout [UInt8]) throws(TOMLError) -> Void)?
    ) throws(TOMLError) -> String {
        index += 3
        if atNewline { try newline() }
        var out: [UInt8] = []
        while true {
            guard let c = peek else { throw error("unterminated multi-line string") }
            switch c {
            case quote:
                var run = 0
                while peek(run) == quote { run += 1 }
                if run < 3 {
                    out.append(contentsOf: repeatElement(quote, count: run))
                    index += run
                    continue
                }
                guard run <= 5 else { throw error("too many quotes where the multi-line string ends") }
                out.append(contentsOf: repeatElement(quote, count: run - 3))
                index += run
                return String(decoding: out, as: UTF8.self)
            case ASCII.lf, ASCII.cr:
                try newline()
                out.append(ASCII.lf)
            case ASCII.backslash where backslash != nil:
                try backslash!(&self, &out)
            default:
                if ASCII.isForbiddenControl(c) { throw error("control character U+\(hex(UInt32(c))) in a string") }
                out.append(c)
                index += 1
            }
        }
    }

    /// An escape sequence, reader on the backslash.
    mutating func escape(into out: inout [UInt8]) throws(TOMLError) {
        let start = index
        index += 1
        guard let c = peek else { throw error("unterminated string") }
        index += 1
        switch c {
        case 0x62: out.append(0x08)  // \b
        case 0x74: out.append(ASCII.tab)  // \t
        case 0x6E: out.append(ASCII.lf)  // \n
        case 0x66: out.append(0x0C)  // \f
        case 0x72: out.append(ASCII.cr)  // \r
        case ASCII.quote, ASCII.backslash: out.append(c)
        case 0x75, 0x55:  // \uXXXX, \UXXXXXXXX
            let digits = c == 0x75 ? 4 : 8
            var code: UInt32 = 0
            for _ in 0..<digits {
                guard let d = peek.flatMap(hexValue) else {
                    throw TOMLError("\\\(Character(Unicode.Scalar(c))) needs \(digits) hexadecimal digits",
                                    at: position(at: start))
                }
                code = code << 4 | d
                index += 1
            }
            guard let scalar = Unicode.Scalar(code) else {
                throw TOMLError("U+\(hex(code)) is not a Unicode scalar value", at: position(at: start))
            }
            out.append(contentsOf: String(Character(scalar)).utf8)
        default:
            throw TOMLError("unknown escape sequence \\\(c >= 0x21 && c <= 0x7E ? String(Character(Unicode.Scalar(c))) : "") (escapes are \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX \\UXXXXXXXX)",
                            at: position(at: start))
        }
    }

    // MARK: Numbers

    /// The characters a number may be made of; what follows is checked by the caller.
    mutating func numberToken() -> [UInt8] {
        let first = index
        while let c = peek, isBareKeyByte(c) || c == ASCII.plus || c == ASCII.dot { index += 1 }
        return Array(bytes[first..<index])
    }

    mutating func number() throws(TOMLError) -> TOMLValue.Kind {
        let start = index
        let token = numberToken()
        func bad(_ message: String) -> TOMLError { TOMLError(message, at: position(at: start)) }
        var body = token[...]
        let sign = body.first == ASCII.plus || body.first == ASCII.minus ? body.removeFirst() : nil
        let negative = sign == ASCII.minus
        if body.elementsEqual("inf".utf8) { return .float(negative ? -.infinity : .infinity) }
        if body.elementsEqual("nan".utf8) { return .float(negative ? -.nan : .nan) }
        if body.count > 2, body.first == 0x30, let radix = [0x78: 16, 0x6F: 8, 0x62: 2][body[body.startIndex + 1]] {
            guard sign == nil else { throw bad("a hexadecimal, octal or binary integer has no sign") }
            guard let magnitude = digitsValue(body.dropFirst(2), radix: radix), magnitude <= UInt64(Int64.max) else {
                throw bad(digitsValid(body.dropFirst(2), radix: radix)
                          ? "integer out of range (64-bit)" : "malformed integer")
            }
            return .integer(Int64(magnitude))
        }
        guard let split = body.firstIndex(where: { $0 == ASCII.dot || $0 == 0x65 || $0 == 0x45 }) else {
            guard decimalIntegerPartValid(body) else { throw bad("malformed number") }
            guard let magnitude = digitsValue(body, radix: 10),
                  magnitude <= (negative ? UInt64(Int64.max) + 1 : UInt64(Int64.max)) else {
                throw bad("integer out of range (64-bit)")
            }
            return .integer(negative ? Int64(truncatingIfNeeded: 0 &- magnitude) : Int64(magnitude))
        }
        guard decimalIntegerPartValid(body[..<split]) else { throw bad("malformed number") }
        var rest = body[split...]
        if rest.first == ASCII.dot {
            rest.removeFirst()
            let end = rest.firstIndex(where: { $0 == 0x65 || $0 == 0x45 }) ?? rest.endIndex
            guard digitsValid(rest[..<end], radix: 10) else { throw bad("malformed float: digits must follow the dot") }
            rest = rest[end...]
        }
        if !rest.isEmpty {
            rest.removeFirst()  // e or E
            if rest.first == ASCII.plus || rest.first == ASCII.minus { rest.removeFirst() }
            guard digitsValid(rest, radix: 10) else { throw bad("malformed float exponent") }
        }
        let text = String(decoding: token.filter { $0 != ASCII.underscore }, as: UTF8.self)
        guard let value = Double(text) else { throw bad("malformed float") }
        return .float(value)
    }

    /// The integer part of a decimal: digits, no leading zero.
    func decimalIntegerPartValid(_ digits: ArraySlice<UInt8>) -> Bool {
        digitsValid(digits, radix: 10) && !(digits.count > 1 && digits.first == 0x30)
    }

    /// Digits of the radix with single underscores between them.
    func digitsValid(_ digits: ArraySlice<UInt8>, radix: Int) -> Bool {
        guard let first = digits.first, let last = digits.last,
              first != ASCII.underscore, last != ASCII.underscore else { return false }
        var previous: UInt8 = 0
        for c in digits {
            if c == ASCII.underscore {
                if previous == ASCII.underscore { return false }
            } else if hexValue(c).map({ Int($0) < radix && (radix == 16 || c <= 0x39) }) != true {
                return false
            }
            previous = c
        }
        return true
    }

    /// The value of valid digits, nil when they are not valid or overflow 64 bits.
    func digitsValue(_ digits: ArraySlice<UInt8>, radix: Int) -> UInt64? {
        guard digitsValid(digits, radix: radix) else { return nil }
        var value: UInt64 = 0
        for c in digits where c != ASCII.underscore {
            let (shifted, o1) = value.multipliedReportingOverflow(by: UInt64(radix))
            let (sum, o2) = shifted.addingReportingOverflow(UInt64(hexValue(c)!))
            if o1 || o2 { return nil }
            value = sum
        }
        return value
    }

    // MARK: Dates and times

    var isDateAhead: Bool {
        (0..<4).allSatisfy { peek($0).map(ASCII.isDigit) == true } && peek(4) == ASCII.minus
    }

    var isTimeAhead: Bool {
        (0..<2).allSatisfy { peek($0).map(ASCII.isDigit) == true } && peek(2) == ASCII.colon
    }

    /// Exactly `count` digits.
    mutating func digits(_ count: Int, _ what: String) throws(TOMLError) -> Int {
        var value = 0
        for _ in 0..<count {
            guard let c = peek, ASCII.isDigit(c) else { throw error("expected \(count) digits for the \(what)") }
            value = value * 10 + Int(c - 0x30)
            index += 1
        }
        return value
    }

    mutating func expect(_ c: UInt8, _ what: String) throws(TOMLError) {
        guard peek == c else { throw error("expected \(what), found \(found)") }
        index += 1
    }

    /// An offset date-time, local date-time or local date (RFC 3339, with a space or lower case
    /// `t`/`z` allowed and the offset optional).
    mutating func dateTime() throws(TOMLError) -> TOMLValue.Kind {
        let start = index
        let year = try digits(4, "year")
        try expect(ASCII.minus, "`-` in the date")
        let month = try digits(2, "month")
        try expect(ASCII.minus, "`-` in the date")
        let day = try digits(2, "day")
        guard (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day) else {
            throw TOMLError("no such date", at: position(at: start))
        }
        let date = TOMLLocalDate(year: year, month: month, day: day)
        switch peek {
        case 0x54?, 0x74?: index += 1  // T, t
        case ASCII.space? where peek(1).map(ASCII.isDigit) == true: index += 1
        default: return .localDate(date)
        }
        let dateTime = TOMLLocalDateTime(date: date, time: try time())
        switch peek {
        case 0x5A?, 0x7A?:  // Z, z
            index += 1
            return .offsetDateTime(TOMLOffsetDateTime(dateTime: dateTime, offsetMinutes: 0, isUTC: true))
        case let sign? where sign == ASCII.plus || sign == ASCII.minus:
            let offsetStart = index
            index += 1
            let hours = try digits(2, "offset's hours")
            try expect(ASCII.colon, "`:` in the offset")
            let minutes = try digits(2, "offset's minutes")
            guard hours < 24, minutes < 60 else { throw TOMLError("no such offset", at: position(at: offsetStart)) }
            let offset = (hours * 60 + minutes) * (sign == ASCII.minus ? -1 : 1)
            return .offsetDateTime(TOMLOffsetDateTime(dateTime: dateTime, offsetMinutes: offset, isUTC: false))
        default:
            return .localDateTime(dateTime)
        }
    }

    /// `HH:MM:SS` with an optional fraction (TOML 1.0 requires the seconds).
    mutating func time() throws(TOMLError) -> TOMLLocalTime {
        let start = index
        let hour = try digits(2, "hour")
        try expect(ASCII.colon, "`:` in the time")
        let minute = try digits(2, "minutes")
        try expect(ASCII.colon, "`:` and seconds in the time")
        let second = try digits(2, "seconds")
        guard hour < 24, minute < 60, second <= 60 else { throw TOMLError("no such time", at: position(at: start)) }
        var fraction: [UInt8] = []
        if peek == ASCII.dot {
            index += 1
            while let c = peek, ASCII.isDigit(c) {
                fraction.append(c)
                index += 1
            }
            guard !fraction.isEmpty else { throw error("expected digits after the dot in the time") }
            while fraction.count > 0 && fraction.last == 0x30 { fraction.removeLast() }
        }
        return TOMLLocalTime(hour: hour, minute: minute, second: second, fraction: String(decoding: fraction, as: UTF8.self))
    }
}

private func daysIn(month: Int, year: Int) -> Int {
    switch month {
    case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
    case 4, 6, 9, 11: 30
    default: 31
    }
}

private func hexValue(_ c: UInt8) -> UInt32? {
    switch c {
    case 0x30...0x39: UInt32(c - 0x30)
    case 0x41...0x46: UInt32(c - 0x41 + 10)
    case 0x61...0x66: UInt32(c - 0x61 + 10)
    default: nil
    }
}

private func hex(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}
