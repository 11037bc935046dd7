import KeychainModel
import Testing

/// kSecAttrAccessControl's flags, checked with Apple's rules (SecAccessControlCreateWithFlags;
/// shared/reference/keychain-semantics.md 3.4), each combination with the code Apple gives.
/// What Apple accepts is stored with the item (passwords and keys), except what is not built
/// yet (constraints on certificates): errSecUnimplemented, never an item stored without its
/// constraint.
@Suite("Access-control flags (issue 29)")
struct AccessControlFlagTests {
    static func addStatus(_ accc: String, sync: Bool = false) -> KeychainStatus? {
        var dict: AttributeDictionary = ["class": .string("genp"), "accc": .string(accc)]
        if sync { dict["sync"] = .bool(true) }
        return queryStatus(dict, for: .add)
    }

    /// userPresence, devicePasscode, privateKeyUsage, alone and in the combinations Apple
    /// allows, kept in the item's attributes.
    @Test(arguments: ["ak;1", "ak;16", "ak;1073741824", "ak;1073741825", "akpu;16", "ak;16400", "ak;32784"])
    func combinationsAppleAcceptsAreKeptWithTheItem(accc: String) throws {
        let query = try ItemQuery(["class": .string("genp"), "accc": .string(accc)], for: .add)
        #expect(query.attributes["accc"] == .string(accc))
        #expect(query.attributes["pdmn"] == .string(String(accc.prefix { $0 != ";" })))
    }

    /// The application password alone and with userPresence, privateKeyUsage, devicePasscode
    /// under Or or And: accepted, as by Apple, and kept with the item.
    @Test(arguments: ["ak;2147483648", "ak;2147483649", "ak;3221225473", "ak;2147483664", "ak;2147500048", "ak;2147516432"])
    func theApplicationPasswordIsKeptWithTheItem(accc: String) throws {
        let query = try ItemQuery(["class": .string("genp"), "accc": .string(accc)], for: .add)
        #expect(query.attributes["accc"] == .string(accc))
        #expect(AccessControl.needsApplicationPassword(AccessControl.storedFlags(query.attributes)))
    }

    @Test func aKeyTakesTheApplicationPassword() {
        #expect(queryStatus(["class": .string("keys"), "accc": .string("ak;2147483648")], for: .add) == nil)
    }

    /// A key's constraint governs its use (sign, decrypt, agree: docs/semantics.md).
    @Test(arguments: ["ak;1", "ak;16", "ak;1073741825", "aku;1073741840"])
    func keysAreKeptWithTheirConstraint(accc: String) throws {
        let query = try ItemQuery(["class": .string("keys"), "accc": .string(accc)], for: .add)
        #expect(query.attributes["accc"] == .string(accc))
    }

    @Test func constraintsOnCertificatesAreNotBuiltYet() {
        #expect(queryStatus(["class": .string("cert"), "accc": .string("ak;1")], for: .add) == .unimplemented)
    }

    @Test func anUpdateGivesConstraintsUnderTheRulesOfAdd() throws {
        #expect(try ItemChanges(["accc": .string("ak;1")], for: .genericPassword).accessControl?.flags == AccessControl.Flag.userPresence)
        #expect(thrownStatus { () throws(KeychainError) in try ItemChanges(["accc": .string("ak;17")], for: .genericPassword) } == .param)
        #expect(thrownStatus { () throws(KeychainError) in try ItemChanges(["accc": .string("ak;8")], for: .genericPassword) } == .notAvailable)
        #expect(thrownStatus { () throws(KeychainError) in try ItemChanges(["accc": .string("ak;1")], for: .certificate) } == .unimplemented)
    }

    @Test func authenticationUIAndTheReasonAreRead() throws {
        let skip = try ItemQuery(["class": .string("genp"), "u_AuthUI": .string("u_AuthUIS"), "u_OpPrompt": .string("why")], for: .copyMatching)
        #expect(skip.authenticationUI == .skip)
        #expect(skip.operationPrompt == "why")
        #expect(try ItemQuery(["class": .string("genp"), "u_AuthUI": .string("u_AuthUIF")], for: .copyMatching).authenticationUI == .fail)
        #expect(try ItemQuery(["class": .string("genp"), "u_NoAuthUI": .bool(true)], for: .copyMatching).authenticationUI == .fail)
        #expect(try ItemQuery(["class": .string("genp")], for: .copyMatching).authenticationUI == .allow)
        #expect(queryStatus(["class": .string("genp"), "u_AuthUI": .string("u_AuthUIS")], for: .delete) == .param)
    }

    @Test(arguments: [
        "ak;17",          // userPresence | devicePasscode
        "ak;16385",       // userPresence | Or
        "ak;32769",       // userPresence | And
        "ak;3",           // userPresence | biometryAny: userPresence's rule comes first, as Apple's
        "ak;49168",       // devicePasscode | Or | And
        "ak;4",           // a bit Apple does not define
        "ak;64",
        "ak;65536",
        "ak;536870912",
    ])
    func combinationsAppleRefusesAreParam(accc: String) {
        #expect(Self.addStatus(accc) == .param)
    }

    /// One documented code for the three constraints that need a device this machine lacks.
    @Test(arguments: ["ak;2", "ak;8", "ak;32", "ak;16402", "ak;2147483650"])
    func biometryAndCompanionFlagsAreNotAvailable(accc: String) {
        #expect(Self.addStatus(accc) == .notAvailable)
    }

    @Test(arguments: ["ak;1", "ak;16", "ak;2147483648"])
    func constraintsOnASynchronizableItemAreParam(accc: String) {
        #expect(Self.addStatus(accc, sync: true) == .param)
    }

    @Test func noFlagsIsAPlainProtectionClass() throws {
        #expect(Self.addStatus("ak;0") == nil)
        #expect(try ItemQuery(["class": .string("genp"), "accc": .string("cku")], for: .add).attributes["pdmn"] == .string("cku"))
    }

    @Test func flagsInASearchDoNotFilterAndAreNotChecked() throws {
        _ = try ItemQuery(["class": .string("genp"), "accc": .string("ak;17")], for: .copyMatching)
    }
}
