#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel
import KeychainProtocol
import Testing
@testable import KeychainServer

/// docs/protocol.md, section 5, is the contract a client is written from: its example frames
/// are read from the page itself and must be exactly what the encoder writes, what the decoder
/// reads back as the documented message, and what the daemon answers.
@Suite("The frames of docs/protocol.md")
struct ProtocolDocumentTests {
    /// One example: a request and its response, either possibly absent. An example that shows
    /// only a response names the earlier request it answers (`repeats`).
    struct Exchange {
        var request: Request?
        var repeats: Request?
        var response: Response?
    }

    static let persistentRef = Array("genp".utf8) + [0x0b, 0x5c, 0x2a, 0x7e, 0x1f, 0x00, 0x9d, 0x41,
                                                     0xc3, 0xe8, 0x0a, 0x6b, 0x27, 0xf5, 0xd2, 0x14]
    static let add = Request.add(["class": .string("genp"), "svce": .string("api"), "acct": .string("me"),
                                  "v_Data": .data(Array("tok".utf8))])
    static let copySecret = Request.copyMatching(["class": .string("genp"), "svce": .string("api"), "r_Data": .bool(true)])
    static let copyReferences = Request.copyMatching(["class": .string("genp"), "m_Limit": .string("m_LimitAll"),
                                                      "r_PersistentRef": .bool(true)])
    /// What the daemon's status says on the fake clock of `LockInvariantTests.Harness`, to a
    /// caller whose group is uid.0, with no passcode set.
    static let status: AttributeDictionary = [
        "version": .string("0.1.0"), "state": .string("unlocked"), "since": .date(721_693_800),
        "passcode": .bool(false), "groups": .string("uid.0"), "failed_attempts": .int(0), "retry_after": .int(0),
    ]

    /// The documented messages, in the order of the page's examples.
    static let exchanges: [Exchange] = [
        Exchange(request: add, response: Response()),
        Exchange(request: copySecret, response: Response(result: .single(.data(Array("tok".utf8))))),
        Exchange(repeats: add, response: Response(status: -25299,
                                    message: "an item with the same primary key already exists in group \"uid.0\"")),
        Exchange(request: copyReferences, response: Response(result: .list([.persistentRef(persistentRef)]))),
        Exchange(request: .status, response: Response(result: .single(.attributes(status)))),
        Exchange(request: .unlock(passcode: SecretBytes(Array("1234".utf8))),
                 response: Response(status: -25293, message: "the passcode is not correct")),
        Exchange(request: .asCaller(pid: 4242, startTime: 1_234_567, inner: .attributeSearch(
                    collection: "login", exact: false, pairs: try! SecretServiceAttributes(["user": "me"]))),
                 response: Response(result: .list([]))),
        Exchange(request: .asCaller(pid: 4242, startTime: 1_234_567, inner: attributeAdd),
                 response: Response(result: .single(.attributes(["replaced": .bool(false), "v_PersistentRef": .data(persistentRef)])))),
        Exchange(request: .asCaller(pid: 4242, startTime: 1_234_567, inner: .portalSecret(appID: "org.example.App"))),
        Exchange(request: .keySign(query: ["labl": .string("k")],
                                   parameters: ["algorithm": .string("algid:sign:EdDSA:message-Ed25519"), "data": .data(Array("hi".utf8))]),
                 response: Response(status: -25300, message: "no item matches the query")),
        Exchange(request: .keyDecrypt(query: ["labl": .string("k")],
                                      parameters: ["algorithm": .string("algid:encrypt:X25519:SealedBox"), "data": .data(Array("0123".utf8))]),
                 response: Response(status: -25300, message: "no item matches the query")),
    ]

    static let attributeAdd = Request.attributeAdd([
        "class": .string("genp"), "svce": .string("secret-service:login"), "labl": .string("mail"), "pdmn": .string("ck"),
        "v_Data": .data(Array("pw".utf8)), "xsat": .data(try! SecretServiceAttributes(["user": "me"]).encoded),
        "xsct": .string("text/plain"),
    ], replace: true)

    /// Every frame of section 5: one list of (label, bytes) per fenced block.
    static func documentedFrames() throws -> [[(label: String, bytes: [UInt8])]] {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/protocol.md")
        let page = try String(contentsOf: path, encoding: .utf8)
        guard let start = page.range(of: "\n## 5."),
              let end = page.range(of: "\n## ", range: start.upperBound..<page.endIndex) else {
            throw KeychainError(.decode, "docs/protocol.md has no section 5 followed by another")
        }
        var blocks: [[(label: String, bytes: [UInt8])]] = []
        var inBlock = false
        for line in page[start.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inBlock.toggle()
                if inBlock { blocks.append([]) }
                continue
            }
            guard inBlock else { continue }
            var text = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)[0]
            if let colon = text.firstIndex(of: ":") {
                blocks[blocks.count - 1].append((String(text[..<colon]), []))
                text = text[text.index(after: colon)...]
            }
            for token in text.split(whereSeparator: \.isWhitespace) {
                guard token.count == 2, let byte = UInt8(token, radix: 16), !blocks[blocks.count - 1].isEmpty else {
                    throw KeychainError(.decode, "docs/protocol.md, section 5: \"\(token)\" in \"\(line)\" is not a frame byte")
                }
                blocks[blocks.count - 1][blocks[blocks.count - 1].count - 1].bytes.append(byte)
            }
        }
        return blocks
    }

    /// The documented exchanges: the page's bytes beside the test's messages.
    static func documented() throws -> [(request: [UInt8]?, response: [UInt8]?, Exchange)] {
        let blocks = try documentedFrames()
        guard blocks.count == exchanges.count else {
            throw KeychainError(.decode, "docs/protocol.md, section 5, has \(blocks.count) examples; this test knows \(exchanges.count)")
        }
        return try zip(blocks, exchanges).map { frames, exchange in
            var request: [UInt8]?
            var response: [UInt8]?
            for frame in frames {
                switch frame.label {
                case "request": request = frame.bytes
                case "response": response = frame.bytes
                default: throw KeychainError(.decode, "docs/protocol.md, section 5: unknown frame label \(frame.label)")
                }
            }
            guard (request == nil) == (exchange.request == nil), (response == nil) == (exchange.response == nil) else {
                throw KeychainError(.decode, "docs/protocol.md, section 5: an example's frames are not the ones this test expects")
            }
            return (request, response, exchange)
        }
    }

    /// The payload of a documented frame, after checking its length header.
    func payload(_ frame: [UInt8]) throws -> [UInt8] {
        try #require(frame.count >= 4)
        let length = frame[0..<4].reversed().reduce(0) { $0 << 8 | Int($1) }
        #expect(length == frame.count - 4, "the frame's length header says \(length); \(frame.count - 4) bytes follow")
        return Array(frame[4...])
    }

    @Test func everyDocumentedRequestIsWhatTheEncoderWritesAndDecodesToItsMessage() throws {
        for (bytes, _, exchange) in try Self.documented() {
            guard let bytes, let request = exchange.request else { continue }
            #expect(hex(Array(WireCodec.frame(request))) == hex(bytes), "\(request.operation)")
            #expect(try WireCodec.decodeRequest(SecretBytes(payload(bytes))) == request)
        }
    }

    @Test func everyDocumentedResponseIsWhatTheEncoderWritesAndDecodesToItsMessage() throws {
        for (_, bytes, exchange) in try Self.documented() {
            guard let bytes, let response = exchange.response else { continue }
            #expect(hex(Array(WireCodec.frame(response))) == hex(bytes))
            #expect(try WireCodec.decodeResponse(SecretBytes(payload(bytes))) == response)
        }
    }

    /// The examples are the daemon's real answers: the page's requests, sent in its order to a
    /// request handler on a fake clock, get the page's responses byte for byte (the persistent
    /// reference aside: its id is random).
    @Test(.enabled(if: getuid() == 0, "the documented answers name the group uid.0, root's"))
    func theDaemonAnswersTheDocumentedRequestsWithTheDocumentedResponses() throws {
        let h = try LockInvariantTests.Harness()
        let exchanges = try Self.documented()
        let answer = { (request: [UInt8]) throws -> Response in
            var decoded = try WireCodec.decodeRequest(SecretBytes(try payload(request)))
            // The handler sees what the server hands it once an asCaller's checks passed (the
            // caller here stands for the process named).
            if case .asCaller(_, _, let inner) = decoded { decoded = inner }
            // The page's unlock is a wrong one: it needs a passcode set ("0000") first.
            if case .unlock = decoded {
                #expect(h.call(.setPasscode(new: SecretBytes(Array("0000".utf8)))) == 0)
            }
            return h.handler.handle(decoded, from: h.caller, policy: h.policy)
        }
        for (request, documented, exchange) in exchanges {
            // A request shown alone (the portal's) is answered only through the server's checks.
            guard documented != nil else { continue }
            let sent = try request ?? Array(WireCodec.frame(#require(exchange.repeats)))
            var response = try answer(sent)
            if case .asCaller(_, _, .attributeAdd)? = exchange.request {
                // The reference's id is random: the shape is what the page promises.
                guard case .single(.attributes(let d)) = response.result, d["replaced"] == .bool(false),
                      case .data(let ref)? = d["v_PersistentRef"], ref.count == 20 else {
                    Issue.record("expected a new item's reference, got \(response)")
                    continue
                }
                response.result = .single(.attributes(["replaced": .bool(false), "v_PersistentRef": .data(Self.persistentRef)]))
            }
            if exchange.request == Self.copyReferences {
                guard case .list(let items) = response.result, items.count == 1,
                      case .persistentRef(let ref) = items[0] else {
                    Issue.record("expected one persistent reference, got \(response)")
                    continue
                }
                #expect(response.status == 0)
                #expect(ref.count == 20 && Array(ref.prefix(4)) == Array("genp".utf8))
                continue
            }
            #expect(hex(Array(WireCodec.frame(response))) == hex(try #require(documented)), "\(response)")
        }
    }

    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined(separator: " ")
    }
}

/// docs/protocol.md, section 4: a client written from the page can name every status it may
/// see, so the table lists exactly the codes of KeychainStatus.
@Suite("The status codes of docs/protocol.md")
struct ProtocolStatusTableTests {
    @Test func theTableListsEveryStatusAndNoOther() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../docs/protocol.md").standardized
        let page = try String(contentsOf: path, encoding: .utf8)
        let section = try #require(page.components(separatedBy: "## 4. Status codes").dropFirst().first)
            .components(separatedBy: "\n## ")[0]
        var documented: [Int32: String] = [:]
        for line in section.split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            if cells.count >= 2, let code = Int32(cells[0]) { documented[code] = cells[1] }
        }
        let statuses = Dictionary(uniqueKeysWithValues: KeychainStatus.allCases.map { ($0.rawValue, $0.name) })
        #expect(Set(documented.keys) == Set(statuses.keys), "documented \(documented.keys.sorted()), KeychainStatus \(statuses.keys.sorted())")
        for (code, name) in documented {
            #expect(statuses[code] == nil || name == statuses[code], "\(code): the page says \(name), KeychainStatus \(statuses[code] ?? "")")
        }
    }
}

/// docs/protocol.md, section 3: the operation table names every code the daemon serves with its
/// name, and the table of codes reserved for the open issues overlaps none of them, so work
/// on two issues at once never gives one number two meanings.
@Suite("The operation codes of docs/protocol.md")
struct ProtocolOperationTableTests {
    /// The rows `| N | name | ...` of the table that follows `heading`, up to the next heading.
    static func rows(after heading: String) throws -> [UInt8: String] {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../docs/protocol.md").standardized
        let page = try String(contentsOf: path, encoding: .utf8)
        let section = try #require(page.components(separatedBy: heading).dropFirst().first)
            .components(separatedBy: "\n#")[0]
        var rows: [UInt8: String] = [:]
        for line in section.split(separator: "\n") where line.hasPrefix("| ") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            if cells.count >= 2, let code = UInt8(cells[0]) { rows[code] = cells[1] }
        }
        return rows
    }

    @Test func theOperationTableListsEveryServedOperationByItsName() throws {
        let documented = try Self.rows(after: "### Request\n")
        let served = Dictionary(uniqueKeysWithValues: Request.Operation.allCases.map { ($0.rawValue, "\($0)") })
        #expect(documented == served, "documented \(documented.sorted { $0.key < $1.key }), served \(served.sorted { $0.key < $1.key })")
    }

    @Test func noReservedCodeIsServedOrListedTwice() throws {
        let reserved = try Self.rows(after: "### Reserved for the open issues (40 to 63)\n")
        let served = Set(Request.Operation.allCases.map(\.rawValue))
        // 40-53 are each either still reserved or built (then moved into the main table).
        #expect(reserved.count + served.filter { (40...53).contains($0) }.count >= 14,
                "the reserved table was not found or lost rows: \(reserved)")
        #expect(served.isDisjoint(with: reserved.keys), "served and reserved: \(served.intersection(reserved.keys).sorted())")
        #expect(Set(reserved.values).count == reserved.count, "a name reserved twice: \(reserved.values.sorted())")
    }
}
