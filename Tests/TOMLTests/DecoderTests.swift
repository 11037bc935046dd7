import Testing
import TOML

@Suite("The TOML decoder")
struct DecoderTests {
    @Test func valuesAndKeysRememberTheirLineAndColumn() throws {
        let table = try TOMLDecoder.decode("# header\n\n[server]\n  port = 8080\n  names = [\n    \"a\",\n    'b',\n  ]\n")
        let server = try #require(table["server"])
        #expect(server.position == TOMLPosition(line: 3, column: 1))
        guard case .table(let entries) = server.kind else { Issue.record("server is \(server.typeName)"); return }
        #expect(entries.entries[0].keyPosition == TOMLPosition(line: 4, column: 3))
        #expect(entries["port"]?.position == TOMLPosition(line: 4, column: 10))
        guard case .array(let names) = entries["names"]?.kind else { Issue.record("names is not an array"); return }
        #expect(names.map(\.position) == [TOMLPosition(line: 6, column: 5), TOMLPosition(line: 7, column: 5)])
    }

    @Test func columnsCountCharactersNotBytes() throws {
        let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode("\"ключ\" = \"é\" x") }
        #expect(error?.position == TOMLPosition(line: 1, column: 14))
    }

    @Test func errorsGiveTheLineAndColumnOfTheProblem() {
        let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode("a = 1\nb = 0x_1\n") }
        #expect(error?.line == 2)
        #expect(error?.column == 5)
        #expect(error?.message == "malformed integer")
    }

    @Test func errorsNeverQuoteTheValuesOfTheDocument() {
        for text in ["password = \"hunter2", "password = hunter2", "password = 'hunter2' junk", "password = [\"hunter2\" 1]"] {
            let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode(text) }
            #expect(error.map { !$0.description.contains("hunter") } == true, "\(error.map(\.description) ?? "")")
        }
    }

    @Test func deeplyNestedArraysAreRefusedNotOverflowingTheStack() {
        let text = "a = " + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode(text) }
        #expect(error?.message.contains("nested more than \(TOMLDecoder.maxDepth) deep") == true)
    }

    @Test func deeplyNestedInlineTablesAreRefused() {
        let text = "a = " + String(repeating: "{b = ", count: 100_000) + "1" + String(repeating: "}", count: 100_000)
        let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode(text) }
        #expect(error?.message.contains("nested more than") == true)
    }

    @Test func deeplyNestedTablesFromHeadersAndDottedKeysAreRefused() {
        let path = Array(repeating: "t", count: 100_000).joined(separator: ".")
        for text in ["[\(path)]", "[[\(path)]]", "\(path) = 1"] {
            let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode(text) }
            #expect(error?.message.contains("nested more than") == true, "\(error.map(\.message) ?? "")")
        }
    }

    @Test func nestingJustWithinTheLimitIsRead() throws {
        let depth = TOMLDecoder.maxDepth - 1
        let text = "a = " + String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        #expect(try TOMLDecoder.decode(text)["a"] != nil)
    }

    @Test func aDocumentOverTheSizeLimitIsRefused() {
        let text = "# " + String(repeating: "x", count: TOMLDecoder.maxBytes)
        let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode(text) }
        #expect(error?.message.contains("larger than") == true)
    }

    @Test func integersOutsideSixtyFourBitsAreRefused() throws {
        #expect(try TOMLDecoder.decode("a = -9223372036854775808")["a"]?.kind == .integer(.min))
        #expect(try TOMLDecoder.decode("a = 0x7fff_ffff_ffff_ffff")["a"]?.kind == .integer(.max))
        for text in ["a = 9223372036854775808", "a = -9223372036854775809", "a = 0x8000000000000000",
                     "a = 99999999999999999999999"] {
            let error = #expect(throws: TOMLError.self) { try TOMLDecoder.decode(text) }
            #expect(error?.message.contains("out of range") == true, "\(text): \(error.map(\.message) ?? "")")
        }
    }

    @Test func invalidUTF8IsRefusedWithItsLine() {
        let error = #expect(throws: TOMLError.self) {
            try TOMLDecoder.decode(utf8: Array("a = 1\n# ".utf8) + [0xC0, 0x80] + Array("\n".utf8))
        }
        #expect(error?.line == 2)
        #expect(error?.column == 3)
        #expect(error?.message == "invalid UTF-8 (byte 0xC0): the file must be UTF-8")
    }

    @Test func keysKeepTheOrderOfTheDocument() throws {
        let table = try TOMLDecoder.decode("z = 1\na = 2\nm.x = 3\n[b]\n[[c]]")
        #expect(table.keys == ["z", "a", "m", "b", "c"])
    }
}
