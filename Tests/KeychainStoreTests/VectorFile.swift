import Foundation
import KeychainModel
import Testing

/// One golden vector from Tests/Vectors (the README there describes the format): named
/// fields, each hex bytes, a quoted UTF-8 text or a decimal number.
struct VectorFile: CustomTestStringConvertible, Sendable {
    let name: String
    /// The format version in the file name (`keybag-v1.hex` is 1).
    let version: Int
    private let fields: Result<[String: String], VectorError>

    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Vectors")

    /// Every version of the vectors of `format`, oldest first: each must go on decoding.
    static func all(_ format: String) -> [VectorFile] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.compactMap { name -> VectorFile? in
            guard name.hasPrefix(format + "-v"), name.hasSuffix(".hex"),
                  let version = Int(name.dropFirst(format.count + 2).dropLast(4)) else { return nil }
            return VectorFile(name: name, version: version)
        }.sorted { $0.version < $1.version }
    }

    /// A file that cannot be read or parsed fails every test that reads a field of it.
    init(name: String, version: Int) {
        self.name = name
        self.version = version
        fields = Result { try Self.parse(name) }.mapError { $0 as? VectorError ?? VectorError("\(name): \($0)") }
    }

    /// A file of negative vectors (`negative/backup.hex`): version 0, fields `case.name`.
    init(negative name: String) {
        self.init(name: "negative/" + name, version: 0)
    }

    /// The negative vector files, by name (`backup.hex`).
    static var negativeFiles: [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("negative").path)) ?? []
        return names.filter { $0.hasSuffix(".hex") }.sorted()
    }

    /// The names of the cases in a negative vector file: every `case` with a `case.error`.
    var caseNames: [String] {
        ((try? fields.get()) ?? [:]).keys.filter { $0.hasSuffix(".error") }.map { String($0.dropLast(6)) }.sorted()
    }

    func has(_ key: String) -> Bool { ((try? fields.get()) ?? [:])[key] != nil }

    private static func parse(_ name: String) throws -> [String: String] {
        let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
        var fields: [String: String] = [:]
        var current: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("#") || line.allSatisfy(\.isWhitespace) { continue }
            if line.first!.isWhitespace, let key = current {
                fields[key]! += " " + line.trimmingCharacters(in: .whitespaces)  // a continued hex field
                continue
            }
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { throw VectorError("\(name): cannot read \"\(line)\"") }
            let key = String(parts[0]).trimmingCharacters(in: .whitespaces)
            guard fields[key] == nil else { throw VectorError("\(name): \(key) appears twice") }
            fields[key] = String(parts[1]).trimmingCharacters(in: .whitespaces)
            current = key
        }
        return fields
    }

    var testDescription: String { name }

    func bytes(_ key: String) throws -> [UInt8] {
        let tokens = try field(key).split(whereSeparator: \.isWhitespace)
        return try tokens.map { token in
            guard token.count == 2, let byte = UInt8(token, radix: 16) else {
                throw VectorError("\(name): \(key) has \"\(token)\", not a hex byte")
            }
            return byte
        }
    }

    func text(_ key: String) throws -> String {
        let value = try field(key)
        guard value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") else {
            throw VectorError("\(name): \(key) is not a quoted text")
        }
        return String(value.dropFirst().dropLast())
    }

    func number(_ key: String) throws -> Int {
        guard let n = Int(try field(key)) else { throw VectorError("\(name): \(key) is not a decimal number") }
        return n
    }

    private func field(_ key: String) throws -> String {
        guard let value = try fields.get()[key] else { throw VectorError("\(name) has no field \(key)") }
        return value
    }
}

struct VectorError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
