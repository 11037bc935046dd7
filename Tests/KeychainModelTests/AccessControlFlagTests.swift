import KeychainModel
import Testing

/// kSecAttrAccessControl's flags, checked with Apple's rules (SecAccessControlCreateWithFlags;
/// shared/reference/keychain-semantics.md 3.4), each combination with the code Apple gives.
/// Combinations Apple accepts still answer errSecUnimplemented until keychaind's prompt can
/// enforce them: never an item stored without its constraint.
@Suite("Access-control flags (issue 29)")
struct AccessControlFlagTests {
    static func addStatus(_ accc: String, sync: Bool = false) -> KeychainStatus? {
        var dict: AttributeDictionary = ["class": .string("genp"), "accc": .string(accc)]
        if sync { dict["sync"] = .bool(true) }
        return queryStatus(dict, for: .add)
    }

    /// userPresence, devicePasscode, applicationPassword, privateKeyUsage, alone and in the
    /// combinations Apple allows (userPresence with applicationPassword and privateKeyUsage;
    /// devicePasscode with applicationPassword under Or or And).
    @Test(arguments: [
        "ak;1", "ak;16", "ak;2147483648", "ak;1073741824", "ak;2147483649", "ak;1073741825",
        "ak;3221225473", "akpu;16", "ak;2147483664", "ak;2147500048", "ak;2147516432", "ak;16400", "ak;32784",
    ])
    func combinationsAppleAcceptsAreNotYetEnforcedSoRefusedAsUnimplemented(accc: String) {
        #expect(Self.addStatus(accc) == .unimplemented)
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
