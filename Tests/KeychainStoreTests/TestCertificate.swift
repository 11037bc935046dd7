import Foundation

/// A certificate from Tests/Certificates (made by generate.sh there) with the values openssl
/// computed for it in expected.txt.
struct TestCertificate: CustomStringConvertible, Sendable {
    let name: String

    static let p256 = TestCertificate(name: "p256")
    static let ed25519 = TestCertificate(name: "ed25519")
    static let rsa = TestCertificate(name: "rsa")

    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Certificates")

    var description: String { name }

    var der: [UInt8] {
        get throws { Array(try Data(contentsOf: Self.directory.appendingPathComponent(name + ".der"))) }
    }

    /// `name.field` of expected.txt as bytes (empty when openssl found none).
    func expected(_ field: String) throws -> [UInt8] {
        let text = try String(contentsOf: Self.directory.appendingPathComponent("expected.txt"), encoding: .utf8)
        let prefix = "\(name).\(field):"
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) else {
            throw CocoaError(.fileReadCorruptFile)
        }
        let hex = Array(line.dropFirst(prefix.count).trimmingCharacters(in: .whitespaces).utf8)
        return stride(from: 0, to: hex.count - 1, by: 2).map { UInt8(String(decoding: hex[$0...$0 + 1], as: UTF8.self), radix: 16)! }
    }
}

extension TestCertificate {
    /// Shorthands for store tests that need a real certificate and its key's klbl.
    static var p256DER: [UInt8] { try! p256.der }
    static var p256KeyID: [UInt8] { try! p256.expected("pkhh") }
    static var ed25519DER: [UInt8] { try! ed25519.der }
    static var ed25519KeyID: [UInt8] { try! ed25519.expected("pkhh") }
}
