import Foundation
import KeychainClient
import KeychainModel
import KeychainProtocol
import Testing

/// The protocol has no null and no array value (docs/protocol.md, "Values and dictionaries"):
/// what a client would send for them, and Apple's `u_ItemList`, are refused with errSecParam,
/// change nothing, and leave the connection usable.
@Suite("Values the protocol cannot express")
struct ValuesWithoutAWireFormTests {
    /// One connection speaking raw payloads.
    struct Peer {
        let socket: UnixSocket

        func call(_ payload: [UInt8]) throws -> Response {
            try socket.writeAll(Frame.encode(payload))
            let frame = try #require(try Frame.read(from: socket, idleTimeoutMs: 5_000, frameTimeoutMs: 5_000))
            return try WireCodec.decodeResponse(frame)
        }
    }

    /// A request whose dictionary holds `class = genp`, then `key` with `value` (its type byte
    /// and bytes, written as given).
    func payload(_ operation: Request.Operation, key: String, value: [UInt8]) -> [UInt8] {
        var w = ByteWriter()
        w.u8(WireCodec.version)
        w.u8(operation.rawValue)
        w.u32(2)
        for (k, v) in [("class", [AttributeCodec.Tag.string.rawValue, 4, 0, 0, 0] + Array("genp".utf8)), (key, value)] {
            w.u16(UInt16(k.utf8.count))
            w.raw(Array(k.utf8))
            w.raw(v)
        }
        if operation == .update {  // the attributes to change
            AttributeCodec.encode(["labl": .string("changed")], into: &w)
        }
        return w.bytes
    }

    /// What a client might send for a list of two strings: a type byte after the five there are.
    static let arrayValue: [UInt8] = [6, 2, 0, 0, 0] + [1, 1, 0, 0, 0, 0x61] + [1, 1, 0, 0, 0, 0x62]

    @Test func anArrayValueIsErrSecParamAndTheConnectionStaysUsable() throws {
        let d = try RunningDaemon()
        let peer = Peer(socket: try UnixSocket.connect(path: d.socketPath))
        defer { peer.socket.close() }
        let refused = try peer.call(payload(.copyMatching, key: "acct", value: Self.arrayValue))
        #expect(refused.status == KeychainStatus.param.rawValue)
        #expect(refused.message.contains("unknown value type 6"), "\(refused.message)")
        #expect(try peer.call(Array(WireCodec.encode(.status))).status == 0)
    }

    @Test func aNullValueIsErrSecParam() throws {
        let d = try RunningDaemon()
        let peer = Peer(socket: try UnixSocket.connect(path: d.socketPath))
        defer { peer.socket.close() }
        let refused = try peer.call(payload(.copyMatching, key: "m_ValidOnDate", value: [0]))
        #expect(refused.status == KeychainStatus.param.rawValue)
        #expect(refused.message.contains("unknown value type 0"), "\(refused.message)")
    }

    @Test(arguments: [Request.Operation.add, .copyMatching, .update, .delete])
    func useItemListIsErrSecParamInEveryOperation(operation: Request.Operation) throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(["class": .string("genp"), "acct": .string("kept"), "v_Data": .data(bytes("s"))])
        let peer = Peer(socket: try UnixSocket.connect(path: d.socketPath))
        defer { peer.socket.close() }
        // The only form it could take: one item's persistent reference as data, not a list.
        let reference = [AttributeCodec.Tag.data.rawValue, 20, 0, 0, 0] + Array("genp".utf8) + [UInt8](repeating: 7, count: 16)
        let refused = try peer.call(payload(operation, key: "u_ItemList", value: reference))
        #expect(refused.status == KeychainStatus.param.rawValue, "\(refused)")
        // Nothing was added, changed or deleted (Apple's add reports success and adds nothing).
        let all = try c.copyMatching(["class": .string("genp"), "m_Limit": .string("m_LimitAll"), "r_Attributes": .bool(true)])
        guard case .list(let items) = all, items.count == 1, case .attributes(let item) = items[0] else {
            Issue.record("expected the one item added, got \(all)")
            return
        }
        #expect(item["acct"] == .string("kept"))
        #expect(item["labl"] != .string("changed"))
    }
}
