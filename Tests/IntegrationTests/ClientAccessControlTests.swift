import KeychainClient
import Testing

/// KeychainClient's `AccessControl` as an app ported from SecAccessControlCreateWithFlags uses
/// it (issue 29): Apple's flag values, refusals with keychaind's codes before anything is sent,
/// and the value read back from an item's attributes.
@Suite("Client access control")
struct ClientAccessControlTests {
    /// A socket nobody listens on: a refusal that comes back from here came from the client.
    static let nowhere = KeychainConnection(socketPath: "/nonexistent/keychaind.sock")

    @Test func theFlagsHaveApplesRawValues() {
        typealias F = AccessControl.Flags
        #expect([F.userPresence, .biometryAny, .biometryCurrentSet, .devicePasscode, .watch, .or, .and, .privateKeyUsage, .applicationPassword]
            .map(\.rawValue) == [1, 2, 8, 16, 32, 1 << 14, 1 << 15, 1 << 30, 1 << 31])
        #expect(F.companion == .watch)
    }

    @Test func combinationsAppleRefusesAreRefusedWithItsCodes() {
        expectStatus(.param) { _ = try AccessControl(protection: .whenUnlocked, flags: [.userPresence, .devicePasscode]) }
        expectStatus(.param) { _ = try AccessControl(protection: .whenUnlocked, flags: [.devicePasscode, .or, .and]) }
        expectStatus(.param) { _ = try AccessControl(protection: .whenUnlocked, flags: AccessControl.Flags(rawValue: 1 << 2)) }
        expectStatus(.notAvailable) { _ = try AccessControl(protection: .whenUnlocked, flags: .biometryAny) }
        expectStatus(.notAvailable) { _ = try AccessControl(protection: .whenUnlocked, flags: [.devicePasscode, .or, .watch]) }
    }

    @Test func combinationsAppleAcceptsAreBuilt() throws {
        for flags: AccessControl.Flags in [[], .userPresence, .devicePasscode, [.userPresence, .applicationPassword], [.devicePasscode, .and, .applicationPassword]] {
            let control = try AccessControl(protection: .afterFirstUnlock, flags: flags)
            #expect(control.constraints == flags)
            #expect(control.protection == .afterFirstUnlock)
        }
    }

    @Test func constraintsOnASynchronizableItemAreRefusedBeforeSending() {
        let control = try! AccessControl(protection: .whenUnlocked, flags: .userPresence)
        expectStatus(.param) {
            try Self.nowhere.add(["class": .string("genp"), "svce": .string("s"), "accc": control.attributeValue,
                                  "sync": .int(1), "v_Data": .data([1])])
        }
        expectStatus(.param) {
            try Self.nowhere.add(["class": .string("genp"), "svce": .string("s"), "accc": control.attributeValue,
                                  "pdmn": .string("ak"), "v_Data": .data([1])])
        }
        // Without constraints the same request is the daemon's to answer (here: nobody listens).
        expectStatus(.serviceNotAvailable) {
            try Self.nowhere.add(["class": .string("genp"), "svce": .string("s"), "accc": .string("ak"), "pdmn": .string("ak"), "v_Data": .data([1])])
        }
    }

    @Test func anItemKeepsItsAccessControlAndSaysItAsksFirst() throws {
        let d = try RunningDaemon()
        let c = KeychainConnection(socketPath: d.socketPath)
        let control = try AccessControl(protection: .whenUnlocked, flags: .userPresence)
        try c.add(["class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "accc": control.attributeValue, "v_Data": .data([1])])
        try c.add(["class": .string("genp"), "svce": .string("prod"), "acct": .string("plain"), "pdmn": .string("ck"), "v_Data": .data([2])])
        let found = try c.copyMatching(["class": .string("genp"), "svce": .string("prod"), "acct": .string("deploy"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let attributes)) = found else { Issue.record("\(found)"); return }
        #expect(AccessControl(attributes: attributes) == control)
        #expect(AccessControl(attributes: attributes)?.asksFirst == true)
        let plain = try c.copyMatching(["class": .string("genp"), "svce": .string("prod"), "acct": .string("plain"), "r_Attributes": .bool(true)])
        guard case .single(.attributes(let plainAttributes)) = plain else { Issue.record("\(plain)"); return }
        let plainControl = try AccessControl(protection: .afterFirstUnlock, flags: [])
        #expect(AccessControl(attributes: plainAttributes) == plainControl)
        #expect(AccessControl(attributes: plainAttributes)?.asksFirst == false)
    }
}
