import Testing
import KeychainModel

/// keychain-semantics.md 4.1 and 4.2: which keys each operation accepts, and the status for
/// those it does not.
@Suite struct ItemQueryClassResolutionTests {
    @Test(arguments: allOperations)
    func missingClassIsParam(operation: ItemOperation) {
        #expect(queryStatus(["acct": .string("a")], for: operation) == .param)
    }

    @Test(arguments: allOperations)
    func unknownClassIsNoSuchClass(operation: ItemOperation) {
        #expect(queryStatus(["class": .string("xxxx")], for: operation) == .noSuchClass)
    }

    @Test func nonStringClassIsParam() {
        #expect(queryStatus(["class": .data(Array("genp".utf8))], for: .copyMatching) == .param)
    }

    @Test(arguments: ItemClass.stored)
    func eachStoredClassResolves(itemClass: ItemClass) throws {
        let q = try ItemQuery(["class": .string(itemClass.rawValue)], for: .add)
        #expect(q.itemClass == itemClass)
    }

    @Test func identityCannotBeAdded() {
        #expect(queryStatus(["class": .string("idnt")], for: .add) == .param)
    }

    @Test func identityCanBeSearchedWithCertificateAndKeyAttributes() throws {
        let q = try ItemQuery(["class": .string("idnt"), "pkhh": .data([1, 2]), "kcls": .int(1)], for: .copyMatching)
        #expect(q.itemClass == .identity)
        #expect(q.attributes["pkhh"] == .data([1, 2]))
        #expect(q.attributes["kcls"] == .int(1))
    }

    @Test func identityRejectsAPasswordAttribute() {
        #expect(queryStatus(["class": .string("idnt"), "svce": .string("s")], for: .copyMatching) == .noSuchAttribute)
    }
}

@Suite struct ItemQueryAttributeKeyTests {
    @Test func unknownFourCharacterAttributeIsNoSuchAttr() {
        #expect(queryStatus(["class": .string("genp"), "zzzz": .string("a")], for: .copyMatching) == .noSuchAttribute)
    }

    @Test func attributeOfAnotherClassIsNoSuchAttr() {
        #expect(queryStatus(["class": .string("genp"), "srvr": .string("example.com")], for: .copyMatching) == .noSuchAttribute)
    }

    @Test func sameAttributeIsAcceptedOnTheClassThatHasIt() throws {
        let q = try ItemQuery(["class": .string("inet"), "srvr": .string("example.com")], for: .copyMatching)
        #expect(q.attributes["srvr"] == .string("example.com"))
    }

    @Test(arguments: allOperations)
    func nlegIsAcceptedAndIgnored(operation: ItemOperation) throws {
        let q = try ItemQuery(["class": .string("genp"), "nleg": .bool(true)], for: operation)
        #expect(q.attributes.isEmpty)
    }

    @Test func unknownNonAttributeKeyIsParam() {
        #expect(queryStatus(["class": .string("genp"), "bogus": .string("x")], for: .copyMatching) == .param)
    }

    @Test(arguments: allOperations)
    func callbackKeysStartingWithFAreIgnored(operation: ItemOperation) throws {
        let q = try ItemQuery(["class": .string("genp"), "f_Callback": .int(1)], for: operation)
        #expect(q.attributes.isEmpty)
    }

    @Test func moreThan128KeysIsParam() {
        var dict: AttributeDictionary = ["class": .string("genp")]
        for i in 0..<128 { dict["m_Option\(i)"] = .bool(true) }
        #expect(dict.count == 129)
        #expect(queryStatus(dict, for: .copyMatching) == .param)
    }

    @Test func exactly128KeysIsAccepted() {
        var dict: AttributeDictionary = ["class": .string("genp")]
        for i in 0..<127 { dict["m_Option\(i)"] = .bool(true) }
        #expect(dict.count == 128)
        #expect(queryStatus(dict, for: .copyMatching) == nil)
    }
}

@Suite struct ItemQueryMatchLimitTests {
    @Test func defaultLimitIsOne() throws {
        let q = try ItemQuery(["class": .string("genp")], for: .copyMatching)
        #expect(q.limit == .one)
        #expect(q.limit.returnsSingle)
    }

    @Test func limitOneString() throws {
        let q = try ItemQuery(["class": .string("genp"), "m_Limit": .string("m_LimitOne")], for: .copyMatching)
        #expect(q.limit == .one)
        #expect(q.limit.returnsSingle)
    }

    @Test func limitAllString() throws {
        let q = try ItemQuery(["class": .string("genp"), "m_Limit": .string("m_LimitAll")], for: .copyMatching)
        #expect(q.limit == .all)
        #expect(!q.limit.returnsSingle)
    }

    @Test func numericLimit() throws {
        let q = try ItemQuery(["class": .string("genp"), "m_Limit": .int(5)], for: .copyMatching)
        #expect(q.limit == .count(5))
        #expect(!q.limit.returnsSingle)
    }

    @Test func numericLimitOneReturnsASingleObject() throws {
        let q = try ItemQuery(["class": .string("genp"), "m_Limit": .int(1)], for: .copyMatching)
        #expect(q.limit.returnsSingle)
    }

    @Test(arguments: [AttributeValue.string("m_LimitSome"), .string("5"), .bool(true), .int(-1), .data([1]), .date(1)])
    func invalidLimitIsParam(value: AttributeValue) {
        #expect(queryStatus(["class": .string("genp"), "m_Limit": value], for: .copyMatching) == .param)
    }

    @Test(arguments: [ItemOperation.update, .delete])
    func limitInUpdateOrDeleteIsParamEvenWhenAll(operation: ItemOperation) {
        #expect(queryStatus(["class": .string("genp"), "m_Limit": .string("m_LimitAll")], for: operation) == .param)
        #expect(queryStatus(["class": .string("genp"), "m_Limit": .string("m_LimitOne")], for: operation) == .param)
    }

    @Test(arguments: ["m_Limit", "m_CaseInsensitive", "m_SearchList"])
    func anyMatchKeyInAddIsParam(key: String) {
        let value: AttributeValue = key == "m_Limit" ? .string("m_LimitOne") : .bool(true)
        #expect(queryStatus(["class": .string("genp"), key: value], for: .add) == .param)
    }

    @Test(arguments: [ItemOperation.update, .delete])
    func otherMatchKeysInUpdateOrDeleteAreParam(operation: ItemOperation) {
        #expect(queryStatus(["class": .string("genp"), "m_CaseInsensitive": .bool(true)], for: operation) == .param)
    }

    @Test func otherMatchKeysAreAcceptedWithoutEffectInCopyMatching() throws {
        let q = try ItemQuery(["class": .string("genp"), "m_CaseInsensitive": .bool(true)], for: .copyMatching)
        #expect(q == ItemQuery(itemClass: .genericPassword))
    }
}

@Suite struct ItemQueryReturnKeyTests {
    @Test(arguments: ["r_Data", "r_Attributes", "r_Ref", "r_PersistentRef"])
    func returnKeysMustBeBooleans(key: String) {
        #expect(queryStatus(["class": .string("genp"), key: .int(1)], for: .copyMatching) == .param)
        #expect(queryStatus(["class": .string("genp"), key: .string("true")], for: .copyMatching) == .param)
    }

    @Test func returnKeysSetTheirFlags() throws {
        let q = try ItemQuery(["class": .string("genp"), "r_Data": .bool(true), "r_Attributes": .bool(true),
                               "r_Ref": .bool(false), "r_PersistentRef": .bool(true)], for: .copyMatching)
        #expect(q.returnData)
        #expect(q.returnAttributes)
        #expect(!q.returnRef)
        #expect(q.returnPersistentRef)
        #expect(q.returnsAnything)
    }

    @Test func returnKeysAreAllowedInAdd() throws {
        let q = try ItemQuery(["class": .string("genp"), "r_PersistentRef": .bool(true)], for: .add)
        #expect(q.returnPersistentRef)
    }

    @Test func noReturnKeyReturnsNothing() throws {
        #expect(try !ItemQuery(["class": .string("genp")], for: .copyMatching).returnsAnything)
    }

    @Test(arguments: [ItemOperation.update, .delete], ["r_Data", "r_Attributes", "r_Ref", "r_PersistentRef"])
    func returnKeyTrueInUpdateOrDeleteIsParam(operation: ItemOperation, key: String) {
        #expect(queryStatus(["class": .string("genp"), key: .bool(true)], for: operation) == .param)
    }

    @Test(arguments: [ItemOperation.update, .delete])
    func returnKeyFalseInUpdateOrDeleteIsAccepted(operation: ItemOperation) throws {
        let q = try ItemQuery(["class": .string("genp"), "r_Data": .bool(false)], for: operation)
        #expect(!q.returnsAnything)
    }

    @Test func unknownReturnKeyIsParam() {
        #expect(queryStatus(["class": .string("genp"), "r_Everything": .bool(true)], for: .copyMatching) == .param)
    }
}

@Suite struct ItemQueryValueKeyTests {
    @Test func valueDataInAddIsTheSecret() throws {
        let q = try ItemQuery(["class": .string("genp"), "v_Data": .data([1, 2, 3])], for: .add)
        #expect(q.data == [1, 2, 3])
        #expect(q.attributes["v_Data"] == nil)
    }

    @Test(arguments: [AttributeValue.string("secret"), .int(1), .bool(true)])
    func valueDataMustBeData(value: AttributeValue) {
        #expect(queryStatus(["class": .string("genp"), "v_Data": value], for: .add) == .param)
    }

    @Test func valueDataOfExactlyOneMebibyteIsAccepted() throws {
        let secret = [UInt8](repeating: 0x5A, count: KeychainLimits.maxSecretBytes)
        let q = try ItemQuery(["class": .string("genp"), "v_Data": .data(secret)], for: .add)
        #expect(q.data?.count == 1 << 20)
    }

    @Test(arguments: [ItemOperation.add, .copyMatching])
    func valueDataOverOneMebibyteIsParam(operation: ItemOperation) {
        let secret = [UInt8](repeating: 0x5A, count: KeychainLimits.maxSecretBytes + 1)
        #expect(queryStatus(["class": .string("genp"), "v_Data": .data(secret)], for: operation) == .param)
    }

    @Test func valueDataInASearchIsAcceptedButDoesNotFilter() throws {
        let q = try ItemQuery(["class": .string("genp"), "v_Data": .data([1])], for: .copyMatching)
        #expect(q.data == nil)
        #expect(q.attributes.isEmpty)
    }

    @Test(arguments: allOperations)
    func valueRefIsParam(operation: ItemOperation) {
        #expect(queryStatus(["class": .string("keys"), "v_Ref": .data([1])], for: operation) == .param)
    }

    @Test func unknownValueKeyIsParam() {
        #expect(queryStatus(["class": .string("genp"), "v_Other": .data([1])], for: .copyMatching) == .param)
    }
}

@Suite struct ItemQueryUseKeyTests {
    @Test(arguments: ["u_Tomb", "u_ItemList", "u_Unknown", "u_AuthCtx"])
    func unknownUseKeyIsParam(key: String) {
        #expect(queryStatus(["class": .string("genp"), key: .bool(true)], for: .copyMatching) == .param)
    }

    /// Apple's client: "kSecUseAuthenticationUISkip is allowed only for SecItemCopyMatching".
    @Test(arguments: [ItemOperation.add, .update, .delete])
    func authUISkipIsParamOutsideCopyMatching(operation: ItemOperation) {
        #expect(queryStatus(["class": .string("genp"), "u_AuthUI": .string("u_AuthUIS")], for: operation) == .param)
    }

    @Test func authUISkipIsAcceptedByCopyMatching() throws {
        let q = try ItemQuery(["class": .string("genp"), "u_AuthUI": .string("u_AuthUIS")], for: .copyMatching)
        #expect(q.attributes.isEmpty)
        #expect(q.authenticationUI == .skip)
    }

    /// Allow and Fail, u_NoAuthUI, u_OpPrompt and u_CallerName are taken out by Apple's client
    /// for every call, so none of them is refused anywhere, and none is an attribute (they act
    /// only on reading an item that asks first).
    @Test(arguments: allOperations, [
        ("u_AuthUI", AttributeValue.string("u_AuthUIA")), ("u_AuthUI", .string("u_AuthUIF")),
        ("u_NoAuthUI", .bool(true)), ("u_OpPrompt", .string("Unlock")), ("u_CallerName", .string("app")),
    ])
    func otherAuthenticationOptionsAreAcceptedByEveryOperation(operation: ItemOperation, option: (String, AttributeValue)) throws {
        let q = try ItemQuery(["class": .string("genp"), option.0: option.1], for: operation)
        #expect(q.attributes.isEmpty)
    }

    @Test(arguments: allOperations)
    func operationPromptIsAcceptedAndNotStored(operation: ItemOperation) throws {
        let q = try ItemQuery(["class": .string("genp"), "u_OpPrompt": .string("Unlock your account")], for: operation)
        #expect(q.attributes.isEmpty)
        #expect(q.operationPrompt == "Unlock your account")
    }
}

@Suite struct ItemQueryProtectionAndSyncTests {
    @Test(arguments: Protection.allCases)
    func everyPdmnCodeIsAccepted(protection: Protection) throws {
        let q = try ItemQuery(["class": .string("genp"), "pdmn": .string(protection.rawValue)], for: .add)
        #expect(q.protection == protection)
    }

    @Test(arguments: [AttributeValue.string("xx"), .string(""), .string("AK"), .string("f"), .int(6)])
    func invalidPdmnIsParam(value: AttributeValue) {
        #expect(queryStatus(["class": .string("genp"), "pdmn": value], for: .add) == .param)
    }

    @Test func syncAnyInASearchRemovesTheSyncFilter() throws {
        let q = try ItemQuery(["class": .string("genp"), "sync": .string("syna")], for: .copyMatching)
        #expect(q.matchesAnySync)
        #expect(q.attributes["sync"] == nil)
    }

    @Test(arguments: [ItemOperation.update, .delete])
    func syncAnyIsAcceptedInUpdateAndDeleteQueries(operation: ItemOperation) throws {
        #expect(try ItemQuery(["class": .string("genp"), "sync": .string("syna")], for: operation).matchesAnySync)
    }

    @Test(arguments: Protection.allCases.filter(\.isThisDeviceOnly))
    func synchronizableThisDeviceOnlyAddIsParam(protection: Protection) {
        #expect(queryStatus(["class": .string("genp"), "sync": .bool(true), "pdmn": .string(protection.rawValue)], for: .add) == .param)
        #expect(queryStatus(["class": .string("genp"), "sync": .int(1), "accc": .string(protection.rawValue)], for: .add) == .param)
    }

    @Test(arguments: Protection.allCases.filter { !$0.isThisDeviceOnly })
    func synchronizableItemThatMayLeaveTheDeviceIsAccepted(protection: Protection) throws {
        let q = try ItemQuery(["class": .string("genp"), "sync": .bool(true), "pdmn": .string(protection.rawValue)], for: .add)
        #expect(q.attributes["sync"] == .int(1))
    }

    @Test func synchronizableThisDeviceOnlyIsOnlyAFilterInASearch() throws {
        _ = try ItemQuery(["class": .string("genp"), "sync": .bool(true), "pdmn": .string("aku")], for: .copyMatching)
    }

    /// Apple's rule: a synchronizable item has no access-control constraints.
    @Test(arguments: ["ak;1", "aku;1", "ak;16", "ak;2147483648"])
    func synchronizableWithAccessControlFlagsIsParam(accc: String) {
        #expect(queryStatus(["class": .string("genp"), "sync": .bool(true), "accc": .string(accc)], for: .add) == .param)
    }

    @Test func syncAnyInAddIsParam() {
        #expect(queryStatus(["class": .string("genp"), "sync": .string("syna")], for: .add) == .param)
    }

    @Test func withoutSyncAnyTheSyncFilterStays() throws {
        #expect(try !ItemQuery(["class": .string("genp")], for: .copyMatching).matchesAnySync)
    }

    @Test(arguments: [
        (AttributeValue.bool(true), Int64(1)), (.bool(false), 0), (.int(0), 0), (.int(1), 1),
        (.int(7), 1), (.int(-3), 1), (.string("1"), 1), (.string("0"), 0), (.string("42"), 1),
    ])
    func syncIsCoercedToZeroOrOne(value: AttributeValue, expected: Int64) throws {
        let q = try ItemQuery(["class": .string("genp"), "sync": value], for: .add)
        #expect(q.attributes["sync"] == .int(expected))
    }

    @Test(arguments: [AttributeValue.string("yes"), .data([1]), .date(0)])
    func syncThatIsNotABooleanNumberOrSynaIsParam(value: AttributeValue) {
        #expect(queryStatus(["class": .string("genp"), "sync": value], for: .copyMatching) == .param)
    }
}

@Suite struct ItemQueryPersistentRefTests {
    @Test func persistentRefIsTwentyBytesAndRoundTrips() throws {
        let id = (0..<16).map { UInt8($0 * 3) }
        let ref = PersistentRef(itemClass: .internetPassword, id: id)
        #expect(ref.bytes.count == 20)
        #expect(Array(ref.bytes.prefix(4)) == Array("inet".utf8))
        let back = try #require(PersistentRef(bytes: ref.bytes))
        #expect(back == ref)
        #expect(back.id == id)
    }

    @Test(arguments: [0, 12, 19, 21])
    func persistentRefOfTheWrongLengthIsRejected(length: Int) {
        let bytes = Array("genp".utf8) + [UInt8](repeating: 1, count: max(0, length - 4))
        #expect(PersistentRef(bytes: Array(bytes.prefix(length))) == nil)
    }

    @Test func persistentRefWithAnUnknownClassCodeIsRejected() {
        #expect(PersistentRef(bytes: Array("abcd".utf8) + [UInt8](repeating: 0, count: 16)) == nil)
    }

    @Test func classIsTakenFromThePersistentRefWhenMissing() throws {
        let q = try ItemQuery(["v_PersistentRef": .data(persistentRefBytes(.certificate))], for: .copyMatching)
        #expect(q.itemClass == .certificate)
        #expect(q.persistentRef?.bytes == persistentRefBytes(.certificate))
    }

    @Test func matchingClassAndPersistentRefAreAccepted() throws {
        let q = try ItemQuery(["class": .string("genp"), "v_PersistentRef": .data(persistentRefBytes(.genericPassword))], for: .copyMatching)
        #expect(q.itemClass == .genericPassword)
    }

    @Test func classThatContradictsThePersistentRefIsParam() {
        #expect(queryStatus(["class": .string("inet"), "v_PersistentRef": .data(persistentRefBytes(.genericPassword))],
                            for: .copyMatching) == .param)
    }

    @Test func persistentRefPlusAnotherAttributeInCopyMatchingIsParam() {
        #expect(queryStatus(["v_PersistentRef": .data(persistentRefBytes(.genericPassword)), "acct": .string("a")],
                            for: .copyMatching) == .param)
    }

    @Test func persistentRefWithReturnKeysAndLimitInCopyMatchingIsAccepted() throws {
        let q = try ItemQuery(["v_PersistentRef": .data(persistentRefBytes(.genericPassword)),
                               "r_Data": .bool(true), "m_Limit": .string("m_LimitAll")], for: .copyMatching)
        #expect(q.returnData)
        #expect(q.limit == .all)
    }

    @Test func persistentRefInAddIsParam() {
        #expect(queryStatus(["class": .string("genp"), "v_PersistentRef": .data(persistentRefBytes(.genericPassword))],
                            for: .add) == .param)
    }

    @Test(arguments: [AttributeValue.data([1, 2, 3]), .string("genp0123456789abcdef")])
    func malformedPersistentRefIsParam(value: AttributeValue) {
        #expect(queryStatus(["v_PersistentRef": value], for: .copyMatching) == .param)
    }
}
