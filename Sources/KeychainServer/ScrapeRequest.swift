/// A scraper's HTTP/1.x request to the metrics listener, read strictly: only `GET /metrics`
/// with a request line and headers that fit in `maxHeadBytes`, lines ended by CRLF, no body.
/// Anything else is refused with a status, never guessed at: the listener answers one
/// request per connection and closes it, so it needs no more of HTTP than this.
enum ScrapeRequest: Equatable {
    /// The head has not ended yet, and fits so far.
    case incomplete
    case metrics
    case refused(status: Int, reason: String)

    /// The request line and the headers, CRLF CRLF included. A scraper sends a few hundred bytes.
    static let maxHeadBytes = 4096

    /// What `received` (every byte read so far on the connection) asks for.
    static func parse(_ received: [UInt8]) -> ScrapeRequest {
        // Refused as soon as seen, not at the time-out: a client that ends lines with a bare LF
        // would never send the CRLF CRLF this waits for.
        for i in received.indices where received[i] == lf && (i == 0 || received[i - 1] != cr) {
            return .refused(status: 400, reason: "lines must end with CRLF")
        }
        guard let end = headEnd(received) else {
            return received.count >= maxHeadBytes ? .refused(status: 400, reason: "request head over \(maxHeadBytes) bytes")
                : .incomplete
        }
        guard end + 4 == received.count else {
            // A body, or a second request written before the first was answered.
            return .refused(status: 400, reason: "bytes after the request head")
        }
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        for i in 0..<end where received[i] == cr {
            guard received[i + 1] == lf else { return .refused(status: 400, reason: "a CR not followed by LF") }
            lines.append(received[start..<i])
            start = i + 2
        }
        lines.append(received[start..<end])
        let requestLine = lines[0]
        let parts = requestLine.split(separator: space, omittingEmptySubsequences: false)
        guard parts.count == 3, let method = ascii(parts[0]), let target = ascii(parts[1]), let version = ascii(parts[2]) else {
            return .refused(status: 400, reason: "the request line is not METHOD TARGET VERSION")
        }
        guard version == "HTTP/1.1" || version == "HTTP/1.0" else {
            return .refused(status: 400, reason: "only HTTP/1.0 and HTTP/1.1 are spoken here")
        }
        guard !method.isEmpty, method.utf8.allSatisfy(isTokenByte) else {
            return .refused(status: 400, reason: "the method is not a token")
        }
        guard target.hasPrefix("/"), target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            return .refused(status: 400, reason: "the target must be a path")
        }
        var hasHost = false
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")), colon > line.startIndex,
                  line[..<colon].allSatisfy(isTokenByte),
                  line[(colon + 1)...].allSatisfy({ $0 == tab || ($0 >= 0x20 && $0 < 0x7F) }) else {
                return .refused(status: 400, reason: "a header line is not NAME: VALUE in printable ASCII")
            }
            let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingSpacesAndTabs
            switch name {
            case "host": hasHost = true
            case "transfer-encoding": return .refused(status: 400, reason: "a request with a body")
            case "content-length" where value != "0": return .refused(status: 400, reason: "a request with a body")
            default: break
            }
        }
        guard hasHost || version == "HTTP/1.0" else { return .refused(status: 400, reason: "HTTP/1.1 needs a Host header") }
        guard method == "GET" else { return .refused(status: 405, reason: "only GET is served") }
        guard target == "/metrics" else { return .refused(status: 404, reason: "only /metrics is served") }
        return .metrics
    }

    /// Where CRLF CRLF starts, if it does within the first `maxHeadBytes`.
    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        let limit = min(bytes.count, maxHeadBytes)
        guard limit >= 4 else { return nil }
        for i in 0...(limit - 4) where bytes[i] == cr && bytes[i + 1] == lf && bytes[i + 2] == cr && bytes[i + 3] == lf {
            return i
        }
        return nil
    }

    private static func ascii(_ bytes: ArraySlice<UInt8>) -> String? {
        bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) ? String(decoding: bytes, as: UTF8.self) : nil
    }

    /// RFC 9110's tchar.
    private static func isTokenByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(c)
    }

    private static let cr = UInt8(ascii: "\r"), lf = UInt8(ascii: "\n"), space = UInt8(ascii: " "), tab = UInt8(ascii: "\t")

    /// The whole answer: a status line, the headers and the body; the connection closes after it.
    static func response(status: Int, body: String, contentType: String = "text/plain; charset=utf-8") -> [UInt8] {
        let reason = [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"][status] ?? "Error"
        var head = "HTTP/1.1 \(status) \(reason)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.utf8.count)\r\n"
        if status == 405 { head += "Allow: GET\r\n" }
        head += "Cache-Control: no-store\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + Array(body.utf8)
    }

    /// Prometheus's text exposition format, version 0.0.4.
    static let expositionType = "text/plain; version=0.0.4; charset=utf-8"
}

private extension String {
    var trimmingSpacesAndTabs: String {
        let bytes = Array(utf8)
        guard let first = bytes.firstIndex(where: { $0 != 0x20 && $0 != 0x09 }),
              let last = bytes.lastIndex(where: { $0 != 0x20 && $0 != 0x09 }) else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
