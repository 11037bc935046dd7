import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// Answers longer than a frame come in pages (docs/protocol.md, "Long answers"), and every item
/// that can be stored can be read back.
@Suite("Long answers", .serialized)
struct LongAnswerTests {
    @Test func aListLongerThanAFrameArrivesWhole() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let label = String(repeating: "L", count: 1_000)
        for i in 0..<1_500 {  // about 1.6 MB of attributes: more than one frame
            try c.add(["class": .string("genp"), "svce": .string("long"), "acct": .string("a\(i)"),
                       "labl": .string(label), "v_Data": .data([1])])
        }
        let list = try d.cli(["list", "--json", "--service", "long"])
        #expect(list.status == 0, "\(list.stderr)")
        #expect(list.text.components(separatedBy: "\"acct\":").count - 1 == 1_500)
        guard case .list(let items) = try c.copyMatching(["class": .string("genp"), "svce": .string("long"),
                                                          "m_Limit": .string("m_LimitAll"), "r_Attributes": .bool(true)]) else {
            Issue.record("not a list")
            return
        }
        #expect(Set(items.compactMap { if case .attributes(let a) = $0 { a["acct"] } else { nil } }).count == 1_500)
    }

    @Test func allTheSecretsOfSeveralLargeItemsArriveInOneAnswer() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let secrets = (0..<4).map { i in [UInt8](repeating: UInt8(i + 1), count: KeychainLimits.maxSecretBytes) }
        for (i, secret) in secrets.enumerated() {
            try c.add(["class": .string("genp"), "svce": .string("big"), "acct": .string("b\(i)"), "v_Data": .data(secret)])
        }
        guard case .list(let items) = try c.copyMatching(["class": .string("genp"), "svce": .string("big"),
                                                          "m_Limit": .string("m_LimitAll"), "r_Data": .bool(true)]) else {
            Issue.record("not a list")
            return
        }
        #expect(Set(items.compactMap { if case .data(let d) = $0 { Array(d) } else { nil } }) == Set(secrets))
        guard case .list(let two) = try c.copyMatching(["class": .string("genp"), "svce": .string("big"),
                                                        "m_Limit": .int(2), "r_Data": .bool(true)]) else {
            Issue.record("not a list")
            return
        }
        #expect(two.count == 2)  // a limit holds across pages
    }

    @Test func theLargestItemARequestCanStoreCanBeReadBack() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        var item: AttributeDictionary = ["class": .string("genp"), "svce": .string("max"), "acct": .string("m"),
                                         "v_Data": .data([UInt8](repeating: 7, count: KeychainLimits.maxSecretBytes))]
        for code in ["labl", "desc", "icmt"] { item[code] = .string(String(repeating: "x", count: KeychainLimits.maxAttributeBytes)) }
        // Fill the request to its last byte with a data attribute.
        let room = Frame.maxPayloadBytes - WireCodec.encode(.add(item.merging(["gena": .data([])]) { $1 })).count
        item["gena"] = .data([UInt8](repeating: 9, count: room))
        #expect(WireCodec.encode(.add(item)).count == Frame.maxPayloadBytes)
        try c.add(item)
        guard case .single(.attributes(let back)) = try c.copyMatching(["class": .string("genp"), "svce": .string("max"),
                                                                        "r_Attributes": .bool(true), "r_Data": .bool(true)]) else {
            Issue.record("no attributes")
            return
        }
        #expect(back["v_Data"] == item["v_Data"] && back["gena"] == item["gena"])
    }
}
