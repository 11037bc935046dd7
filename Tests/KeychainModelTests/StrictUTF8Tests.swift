import KeychainModel
import Testing

/// StrictUTF8 stands in for `String(validating:as:)` on the wire's text fields: it must accept
/// and refuse exactly the same bytes.
@Suite("Strict UTF-8")
struct StrictUTF8Tests {
    static let inputs: [[UInt8]] = [
        [],
        Array("api.example.com".utf8),
        Array("Zoë – 日本 🔑".utf8),
        [0xEF, 0xBF, 0xBD],  // U+FFFD itself, which repairing would also produce
        [0x00, 0x7F],
        [0xFF],  // never valid
        [0xC0, 0xAF],  // overlong "/"
        [0xE0, 0x80, 0xAF],  // overlong, three bytes
        [0xED, 0xA0, 0x80],  // a surrogate half
        [0xF4, 0x90, 0x80, 0x80],  // beyond U+10FFFF
        [0xE6, 0x97],  // cut short
        [0x61, 0x80, 0x62],  // a lone continuation byte
        [0xF0, 0x9F, 0x94, 0x91, 0xF0],  // valid, then the start of another
    ]

    @Test(arguments: inputs)
    func agreesWithTheStandardLibrarysValidation(_ bytes: [UInt8]) {
        #expect(StrictUTF8.string(bytes) == String(validating: bytes, as: UTF8.self))
    }

    @Test func refusesWhatRepairingWouldChange() {
        #expect(StrictUTF8.string([0x73, 0x76, 0x63, 0xFF]) == nil)
        #expect(StrictUTF8.string([0x73, 0x76, 0x63, 0xEF, 0xBF, 0xBD]) == "svc\u{FFFD}")
    }
}
