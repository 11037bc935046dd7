import Testing
import KeychainModel

@Suite struct KeychainErrorTests {
    @Test func errorsWithTheSameStatusAreEqualWhateverTheMessage() {
        #expect(KeychainError(.param, "one message") == KeychainError(.param, "another message"))
    }

    @Test func errorsWithDifferentStatusesAreNotEqualEvenWithTheSameMessage() {
        #expect(KeychainError(.param, "same") != KeychainError(.decode, "same"))
    }

    @Test func paramShorthandHasStatusParam() {
        #expect(KeychainError.param("x").status == .param)
    }

    @Test(arguments: KeychainStatus.allCases)
    func errorDescriptionContainsTheAppleConstantName(status: KeychainStatus) {
        let description = KeychainError(status, "details").description
        #expect(description.contains(status.name))
        #expect(description.contains(String(status.rawValue)))
        #expect(description.contains("details"))
    }

    @Test func statusNamesAreApplesConstantNames() {
        #expect(KeychainStatus.param.name == "errSecParam")
        #expect(KeychainStatus.noSuchAttribute.name == "errSecNoSuchAttr")
        #expect(KeychainStatus.interactionNotAllowed.name == "errSecInteractionNotAllowed")
        #expect(KeychainStatus.missingEntitlement.name == "errSecMissingEntitlement")
    }

    @Test func statusNamesAreDistinctAndFollowTheErrSecConvention() {
        let names = KeychainStatus.allCases.map(\.name)
        #expect(Set(names).count == names.count)
        #expect(names.allSatisfy { $0.hasPrefix("errSec") })
    }

    /// keychain-semantics.md section 5.
    @Test func statusCodesAreApplesOSStatusValues() {
        let expected: [KeychainStatus: Int32] = [
            .success: 0, .unimplemented: -4, .io: -36, .param: -50, .allocate: -108, .userCanceled: -128,
            .notAvailable: -25291, .readOnly: -25292, .authFailed: -25293, .duplicateItem: -25299,
            .itemNotFound: -25300, .noSuchAttribute: -25303, .noSuchClass: -25306,
            .interactionNotAllowed: -25308, .decode: -26275, .internal: -26276,
            .missingEntitlement: -34018, .unknownFormat: -25257,
        ]
        for (status, value) in expected {
            #expect(status.rawValue == value, "\(status.name)")
        }
    }
}

@Suite struct ProtectionTests {
    @Test func thisDeviceOnlyClassesAreExactlyAkuCkuDkuAkpu() {
        let thisDeviceOnly = Set(Protection.allCases.filter(\.isThisDeviceOnly))
        #expect(thisDeviceOnly == [.whenUnlockedThisDeviceOnly, .afterFirstUnlockThisDeviceOnly,
                                   .alwaysThisDeviceOnly, .whenPasscodeSetThisDeviceOnly])
    }

    @Test func purgedOnLockClassesAreExactlyAkAkuAkpu() {
        let purged = Set(Protection.allCases.filter(\.isPurgedOnLock))
        #expect(purged == [.whenUnlocked, .whenUnlockedThisDeviceOnly, .whenPasscodeSetThisDeviceOnly])
    }

    @Test func alwaysClassesAreTheOnlyOnesNotProtectedByThePasscode() {
        let unprotected = Set(Protection.allCases.filter { !$0.isPasscodeProtected })
        #expect(unprotected == [.always, .alwaysThisDeviceOnly])
    }

    @Test func rawValuesAreApplesPdmnCodes() {
        #expect(Protection.allCases.map(\.rawValue) == ["ak", "ck", "dk", "aku", "cku", "dku", "akpu"])
    }

    /// keychain-semantics.md 3.1: key class numbers 6 to 12.
    @Test func keyClassNumbersAreApplesSixToTwelve() {
        let numbers = Dictionary(uniqueKeysWithValues: Protection.allCases.map { ($0.rawValue, $0.keyClassNumber) })
        #expect(numbers == ["ak": 6, "ck": 7, "dk": 8, "aku": 9, "cku": 10, "dku": 11, "akpu": 12])
    }

    @Test func ordersByKeyClassNumber() {
        #expect(Protection.allCases.sorted() == Protection.allCases.sorted { $0.keyClassNumber < $1.keyClassNumber })
        #expect(Protection.whenUnlocked < Protection.whenPasscodeSetThisDeviceOnly)
    }

    @Test func certificatesDefaultToAlways() {
        #expect(ItemClass.certificate.defaultProtection == .always)
    }

    @Test(arguments: [ItemClass.genericPassword, .internetPassword, .key])
    func otherStoredClassesDefaultToWhenUnlocked(itemClass: ItemClass) {
        #expect(itemClass.defaultProtection == .whenUnlocked)
    }
}

@Suite struct ItemClassTests {
    @Test func rawValuesAreApplesClassCodes() {
        #expect(ItemClass.allCases.map(\.rawValue) == ["genp", "inet", "cert", "keys", "idnt"])
    }

    @Test func identityIsTheOnlyClassWithoutRowsOfItsOwn() {
        #expect(ItemClass.stored == [.genericPassword, .internetPassword, .certificate, .key])
        #expect(ClassSchema.of(.identity) == nil)
    }
}

@Suite struct MatchLimitTests {
    @Test func limitOneReturnsASingleObject() {
        #expect(MatchLimit.one.returnsSingle)
        #expect(MatchLimit.one.maxRows == 1)
    }

    @Test func numericLimitOneReturnsASingleObject() {
        #expect(MatchLimit.count(1).returnsSingle)
    }

    @Test func numericLimitAboveOneReturnsAnArray() {
        #expect(!MatchLimit.count(2).returnsSingle)
        #expect(MatchLimit.count(2).maxRows == 2)
    }

    @Test func limitAllReturnsAnArrayWithoutARowLimit() {
        #expect(!MatchLimit.all.returnsSingle)
        #expect(MatchLimit.all.maxRows == nil)
    }
}
