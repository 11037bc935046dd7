import Foundation
import Testing
import TOML

/// toml-test's cases for TOML 1.0.0 (the list file files-toml-1.0.0 names them), which
/// scripts/fetch-toml-test puts in .build/toml-test: every valid document decodes to exactly the
/// tagged JSON beside it, every invalid one is refused.
@Suite("toml-test conformance")
struct ConformanceTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../.build/toml-test").standardized

    /// The cases named in the list, or nil (and a failure saying how to get them).
    static func cases(_ kind: String) -> [String]? {
        let list = corpus.appendingPathComponent("files-toml-1.0.0")
        guard let text = try? String(contentsOf: list, encoding: .utf8) else {
            Issue.record("toml-test's cases are missing from \(corpus.path): run scripts/fetch-toml-test")
            return nil
        }
        return text.split(separator: "\n").map(String.init)
            .filter { $0.hasPrefix(kind + "/") && $0.hasSuffix(".toml") }
    }

    static func bytes(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: corpus.appendingPathComponent(name)))
    }

    @Test func everyValidDocumentDecodesToItsExpectedValues() throws {
        guard let names = Self.cases("valid") else { return }
        #expect(names.count > 200, "the list names only \(names.count) valid cases")
        var passed = 0
        for name in names {
            let expected = try JSONSerialization.jsonObject(
                with: Data(Self.bytes(name.replacingOccurrences(of: ".toml", with: ".json"))), options: [])
            do {
                let table = try TOMLDecoder.decode(utf8: Self.bytes(name))
                if let difference = TaggedJSON.difference(TOMLValue(.table(table), at: .init(line: 1, column: 1)),
                                                          expected, path: "") {
                    Issue.record("\(name): \(difference)")
                } else {
                    passed += 1
                }
            } catch {
                Issue.record("\(name) was refused: \(error)")
            }
        }
        print("toml-test valid: \(passed) of \(names.count) pass")
    }

    @Test func everyInvalidDocumentIsRefused() throws {
        guard let names = Self.cases("invalid") else { return }
        #expect(names.count > 200, "the list names only \(names.count) invalid cases")
        var passed = 0
        for name in names {
            do {
                _ = try TOMLDecoder.decode(utf8: Self.bytes(name))
                Issue.record("\(name) was accepted")
            } catch {
                passed += 1
            }
        }
        print("toml-test invalid: \(passed) of \(names.count) pass")
    }
}

/// Damaged documents end in a value or a TOMLError, never in a trap: every prefix of every valid
/// case, and each case with seeded random bytes overwritten.
@Suite("Damaged toml-test documents")
struct DamagedDocumentTests {
    @Test func everyPrefixOfAValidDocumentIsDecodedOrRefused() throws {
        guard let names = ConformanceTests.cases("valid") else { return }
        for name in names {
            let bytes = try ConformanceTests.bytes(name)
            for end in 0..<bytes.count { _ = try? TOMLDecoder.decode(utf8: Array(bytes[..<end])) }
        }
    }

    @Test func documentsWithRandomBytesOverwrittenAreDecodedOrRefused() throws {
        guard let names = ConformanceTests.cases("valid") else { return }
        var random = SplitMix64(seed: 0x746F_6D6C)
        let interesting: [UInt8] = Array("\"'[]{}=,.#\\\n\r\t 0-+_:eTZ".utf8) + [0x00, 0x7F, 0x80, 0xC3, 0xED, 0xF4, 0xFF]
        for name in names {
            let original = try ConformanceTests.bytes(name)
            guard !original.isEmpty else { continue }
            for _ in 0..<50 {
                var bytes = original
                for _ in 0..<(1 + random.next() % 3) {
                    let at = Int(random.next() % UInt64(bytes.count))
                    bytes[at] = interesting[Int(random.next() % UInt64(interesting.count))]
                }
                _ = try? TOMLDecoder.decode(utf8: bytes)
            }
        }
    }
}

/// A small seeded generator, so that a failure replays.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// toml-test's expected output: a table is a JSON object, an array a JSON array, and every other
/// value `{"type": …, "value": "…"}` with the value as a string.
enum TaggedJSON {
    /// Where and how the decoded value differs from the expected JSON; nil when it does not.
    static func difference(_ value: TOMLValue, _ expected: Any, path: String) -> String? {
        switch value.kind {
        case .table(let table):
            guard let object = expected as? [String: Any] else { return "\(path): a table where \(expected) was expected" }
            guard Set(table.keys) == Set(object.keys) else {
                return "\(path): keys \(table.keys.sorted()) where \(object.keys.sorted()) were expected"
            }
            for entry in table.entries {
                if let d = difference(entry.value, object[entry.key]!, path: path + "." + entry.key) { return d }
            }
            return nil
        case .array(let items):
            guard let array = expected as? [Any], array.count == items.count else {
                return "\(path): an array of \(items.count) where \(expected) was expected"
            }
            for (i, (item, want)) in zip(items, array).enumerated() {
                if let d = difference(item, want, path: path + "[\(i)]") { return d }
            }
            return nil
        default:
            guard let tagged = expected as? [String: Any], let type = tagged["type"] as? String,
                  let text = tagged["value"] as? String else {
                return "\(path): \(value.kind) where \(expected) was expected"
            }
            return matches(value.kind, type: type, text: text) ? nil : "\(path): \(value.kind) where \(type) \(text) was expected"
        }
    }

    static func matches(_ kind: TOMLValue.Kind, type: String, text: String) -> Bool {
        switch kind {
        case .string(let s): type == "string" && s == text
        case .integer(let i): type == "integer" && Int64(text) == i
        case .bool(let b): type == "bool" && text == String(b)
        case .float(let d):
            type == "float" && (d.isNaN ? text.hasSuffix("nan")
                : text.hasSuffix("inf") ? d == (text.hasPrefix("-") ? -Double.infinity : .infinity)
                : Double(text) == d)
        case .offsetDateTime(let v): type == "datetime" && normalisedDateTime(text) == normalisedDateTime(v.description)
        case .localDateTime(let v): type == "datetime-local" && normalisedDateTime(text) == normalisedDateTime(v.description)
        case .localDate(let v): type == "date-local" && text == v.description
        case .localTime(let v): type == "time-local" && normalisedDateTime(text) == normalisedDateTime(v.description)
        case .table, .array: false
        }
    }

    /// As toml-test compares date-times: `T` and `Z` in upper case, a space read as `T`, the
    /// fraction of a second by value (.6 == .600), and +00:00 the same as Z.
    static func normalisedDateTime(_ text: String) -> String {
        var s = text.uppercased()
        if s.count > 10, s[s.index(s.startIndex, offsetBy: 10)] == " " {
            s.replaceSubrange(s.index(s.startIndex, offsetBy: 10)...s.index(s.startIndex, offsetBy: 10), with: "T")
        }
        if s.hasSuffix("+00:00") { s = String(s.dropLast(6)) + "Z" }
        guard let dot = s.firstIndex(of: ".") else { return s }
        let digitsEnd = s[s.index(after: dot)...].firstIndex(where: { !$0.isNumber }) ?? s.endIndex
        var fraction = s[s.index(after: dot)..<digitsEnd]
        while fraction.last == "0" { fraction = fraction.dropLast() }
        return String(s[..<dot]) + (fraction.isEmpty ? "" : "." + fraction) + s[digitsEnd...]
    }
}
