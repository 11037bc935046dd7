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

    @Test func theAnswerSaysItsLengthAndCloses() {
        let text = String(decoding: ScrapeRequest.response(status: 200, body: "a 1\n", contentType: ScrapeRequest.expositionType), as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(text.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"))
        #expect(text.contains("Content-Length: 4\r\n"))
        #expect(text.contains("Connection: close\r\n"))
        #expect(text.hasSuffix("\r\n\r\na 1\n"))
    }
}
