import KeychainModel
import KeychainProtocol
import KeychainStore
import Testing
@testable import KeychainServer

/// An attribute search answers every match of a collection (Collection.Items may be thousands
/// of items): the answer goes in frames of about a page each (docs/protocol.md, "Long answers").
@Suite("Attribute search answers in pages")
struct AttributeSearchPagingTests {
    static func row(_ i: Int) -> ItemResult {
        .attributes(["v_PersistentRef": .data(Array("genp".utf8) + [UInt8](repeating: UInt8(i & 0xFF), count: 16)),
                     "pdmn": .string("ck"), "agrp": .string("uid.1000"), "locked": .bool(false),
                     "cdat": .date(Double(i)), "mdat": .date(Double(i))])
    }

    @Test func aLongAnswerIsCutIntoPagesThatTogetherHoldEveryRow() {
        let rows = (0..<30_000).map(Self.row)
        var pages: [Response] = []
        let last = StoreExecutor.paged(Response(result: .list(rows))) { page in
            pages.append(page)
            return true
        }
        #expect(pages.count >= 2)
        #expect(pages.allSatisfy { $0.continues })
        #expect(!last.continues)
        for page in pages + [last] {
            guard case .list(let items) = page.result else { Issue.record("a page is not a list"); continue }
            #expect(items.reduce(0) { $0 + WireCodec.encodedSize($1) } <= SealedRows.pageBytes)
        }
        let joined = (pages + [last]).flatMap { page -> [ItemResult] in
            if case .list(let items) = page.result { return items }
            return []
        }
        #expect(joined == rows)
    }

    @Test func aShortAnswerIsOneFrame() {
        var emitted = 0
        let answer = StoreExecutor.paged(Response(result: .list([Self.row(1)]))) { _ in
            emitted += 1
            return true
        }
        #expect(emitted == 0 && answer == Response(result: .list([Self.row(1)])))
    }

    @Test func aClientThatLeavesMidAnswerEndsIt() {
        let answer = StoreExecutor.paged(Response(result: .list((0..<30_000).map(Self.row)))) { _ in false }
        #expect(answer.status == KeychainStatus.io.rawValue)
    }
}
