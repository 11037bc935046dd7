import KeychainClient
import KeychainModel
import Testing

/// Issue 13's SecItem rules through the socket, where the value's wire type is what the rule
/// is about (a string, a number, a boolean, a date).
@Suite("SecItem rules through the daemon", .serialized)
struct SecItemRulesTests {
    static let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("svc"), "acct": .string("me")]

    @Test func authUISkipIsForCopyMatchingOnly() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let skip: AttributeDictionary = ["u_AuthUI": .string("u_AuthUIS")]
        expectStatus(.param) { _ = try c.add(Self.item.merging(skip) { $1 }) }
        try c.add(Self.item)
        #expect(try c.copyMatching(Self.item.merging(skip) { $1 }) == .none)
        expectStatus(.param) { try c.update(Self.item.merging(skip) { $1 }, ["labl": .string("L")]) }
        expectStatus(.param) { try c.delete(Self.item.merging(skip) { $1 }) }
        try c.delete(Self.item.merging(["u_AuthUI": .string("u_AuthUIF")]) { $1 })
    }

    @Test func aNumberAccountAndItsDecimalTextAreTwoItems() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let number: AttributeDictionary = ["class": .string("genp"), "svce": .string("svc"), "acct": .int(42)]
        let text: AttributeDictionary = ["class": .string("genp"), "svce": .string("svc"), "acct": .string("42")]
        try c.add(number.merging(["v_Data": .data(bytes("number"))]) { $1 })
        expectStatus(.itemNotFound) { _ = try c.copyMatching(text) }
        try c.add(text.merging(["v_Data": .data(bytes("text"))]) { $1 })
        #expect(try c.copyMatching(number.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(bytes("number"))))
        #expect(try c.copyMatching(text.merging(["r_Data": .bool(true)]) { $1 }) == .single(.data(bytes("text"))))
        guard case .single(.attributes(let attrs)) = try c.copyMatching(number.merging(["r_Attributes": .bool(true)]) { $1 }) else {
            Issue.record("no attributes")
            return
        }
        #expect(attrs["acct"] == .int(42))
    }

    @Test func aBooleanAccountIsParam() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.param) { _ = try c.add(["class": .string("genp"), "svce": .string("svc"), "acct": .bool(true)]) }
    }

    @Test func anUpdateCarryingMdatSucceedsWithTheDaemonsDate() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        try c.add(Self.item)
        try c.update(Self.item, ["mdat": .date(0), "cdat": .date(0), "labl": .string("L")])
        guard case .single(.attributes(let attrs)) = try c.copyMatching(Self.item.merging(["r_Attributes": .bool(true)]) { $1 }),
              case .date(let mdat)? = attrs["mdat"], case .date(let cdat)? = attrs["cdat"] else {
            Issue.record("no dates")
            return
        }
        #expect(mdat > cdat)
        #expect(cdat > 0)
        #expect(attrs["labl"] == .string("L"))
    }

    @Test func aSynchronizableThisDeviceOnlyItemOrOneWithFlagsIsParam() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        expectStatus(.param) { _ = try c.add(Self.item.merging(["sync": .bool(true), "pdmn": .string("aku")]) { $1 }) }
        expectStatus(.param) { _ = try c.add(Self.item.merging(["sync": .bool(true), "accc": .string("ak;1")]) { $1 }) }
        try c.add(Self.item.merging(["pdmn": .string("cku")]) { $1 })
        expectStatus(.param) { try c.update(Self.item, ["sync": .bool(true)]) }
    }
}
