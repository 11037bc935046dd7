import Testing
@testable import KeychainServer

/// The metrics listener's HTTP reader: GET /metrics and nothing else, strictly.
@Suite("A scraper's request")
struct ScrapeRequestTests {
    func parse(_ text: String) -> ScrapeRequest { ScrapeRequest.parse(Array(text.utf8)) }

    func status(_ text: String) -> Int? {
        if case .refused(let status, _) = parse(text) { return status }
        return nil
    }

    @Test func aScrapersGetIsServed() {
        #expect(parse("GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: Prometheus/2.45\r\nAccept: text/plain\r\n\r\n") == .metrics)
        #expect(parse("GET /metrics HTTP/1.0\r\n\r\n") == .metrics)
    }

    @Test func aHeadNotYetEndedWaitsForMore() {
        #expect(parse("GET /metr") == .incomplete)
        #expect(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n") == .incomplete)
    }

    @Test func aHeadOverTheCapIsRefusedWithoutWaitingForItsEnd() {
        let huge = "GET /" + String(repeating: "a", count: ScrapeRequest.maxHeadBytes) + " HTTP/1.1"
        #expect(status(String(huge.prefix(ScrapeRequest.maxHeadBytes))) == 400)
    }

    @Test func anotherMethodIs405() {
        #expect(status("POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == 405)
        #expect(status("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n") == 405)
    }

    @Test func anotherPathIs404() {
        #expect(status("GET / HTTP/1.1\r\nHost: x\r\n\r\n") == 404)
        #expect(status("GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n") == 404)
        #expect(status("GET /metrics/../secret HTTP/1.1\r\nHost: x\r\n\r\n") == 404)
    }

    @Test func malformedRequestsAre400() {
        for text in ["GET /metrics HTTP/1.1\n\n",                                  // bare LF
                     "GET /metrics\r\n\r\n",                                         // HTTP/0.9
                     "GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n",                   // two spaces
                     "GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n",
                     "GET http://x/metrics HTTP/1.1\r\nHost: x\r\n\r\n",            // absolute form
                     "GET /metrics HTTP/1.1\r\n\r\n",                                // 1.1 without Host
                     "GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",          // obs-fold
                     "GET /metrics HTTP/1.1\r\nHost x\r\n\r\n",
                     "GET /metrics HTTP/1.1\r\nHost: \u{1}\r\n\r\n",
                     "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
                     "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                     "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n", // a second request
                     "GET /metrics HTTP/1.1\rHost: x\r\n\r\n"] {
            #expect(status(text) == 400, "\(text.debugDescription)")
        }
    }

    @Test func everyPrefixOfAScrapersRequestWaitsAndOnlyTheWholeIsServed() {
        let request = Array("GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n".utf8)
        for count in 0..<request.count {
            #expect(ScrapeRequest.parse(Array(request[..<count])) == .incomplete, "\(count) bytes")
        }
        #expect(ScrapeRequest.parse(request) == .metrics)
    }

    /// Arbitrary bytes (a fixed xorshift sequence, so a failure repeats): never a trap, and
    /// never served unless they are a GET of /metrics.
    @Test func arbitraryBytesAreRefusedOrWaitedOnNeverServed() {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
        let alphabet = Array("GET /metrics HTTP/1.1\r\n:Host \t\0\u{7F}\u{80}".utf8)
        for _ in 0..<20_000 {
            let count = Int(next() % 96)
            let bytes = (0..<count).map { _ in next() % 4 == 0 ? UInt8(truncatingIfNeeded: next()) : alphabet[Int(next() % UInt64(alphabet.count))] }
            if ScrapeRequest.parse(bytes) == .metrics {
                #expect(bytes.starts(with: Array("GET /metrics HTTP/1.".utf8)), "\(bytes)")
            }
        }
    }

    @Test func theAnswerSaysItsLengthAndCloses() {
        let text = String(decoding: ScrapeRequest.response(status: 200, body: "a 1\n", contentType: ScrapeRequest.expositionType), as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(text.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"))
        #expect(text.contains("Content-Length: 4\r\n"))
        #expect(text.contains("Connection: close\r\n"))
        #expect(text.hasSuffix("\r\n\r\na 1\n"))
    }
}
