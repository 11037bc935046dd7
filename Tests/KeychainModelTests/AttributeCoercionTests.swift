import Testing
import KeychainModel

/// keychain-semantics.md 1.2: how each attribute kind converts a caller's value.
@Suite struct AttributeCoercionTests {
    private func coerced(_ cls: String, _ code: String, _ value: AttributeValue) throws -> AttributeValue? {
        try ItemQuery(["class": .string(cls), code: value], for: .add).attributes[code]
    }

    // MARK: number

    @Test func decimalStringForANumberAttributeBecomesANumber() throws {
        #expect(try coerced("inet", "port", .string("443")) == .int(443))
    }

    @Test func negativeDecimalStringBecomesANumber() throws {
        #expect(try coerced("inet", "port", .string("-5")) == .int(-5))
    }

    @Test func keyClassStringOneIsTheNumberOne() throws {
        #expect(try coerced("keys", "kcls", .string("1")) == .int(1))
    }

    @Test func nonDecimalStringForANumberAttributeStaysAString() throws {
        #expect(try coerced("inet", "ptcl", .string("htps")) == .string("htps"))
    }

    @Test(arguments: ["4 43", "+443", "443 ", "0x1F", "", "-", "99999999999999999999"])
    func stringsThatAreNotExactlyADecimalIntegerStayStrings(text: String) throws {
        #expect(try coerced("inet", "port", .string(text)) == .string(text))
    }

    @Test func booleanForANumberAttributeBecomesZeroOrOne() throws {
        #expect(try coerced("genp", "invi", .bool(true)) == .int(1))
        #expect(try coerced("genp", "invi", .bool(false)) == .int(0))
    }

    @Test(arguments: [AttributeValue.data([1]), .date(0)])
    func dataOrDateForANumberAttributeIsParam(value: AttributeValue) {
        #expect(queryStatus(["class": .string("inet"), "port": value], for: .add) == .param)
    }

    // MARK: date

    @Test func dateAttributeRejectsAString() {
        #expect(queryStatus(["class": .string("keys"), "sdat": .string("2024-01-01")], for: .add) == .param)
    }

    @Test(arguments: [AttributeValue.int(0), .data([0]), .bool(true)])
    func dateAttributeRejectsOtherNonDates(value: AttributeValue) {
        #expect(queryStatus(["class": .string("keys"), "edat": value], for: .copyMatching) == .param)
    }

    @Test(arguments: [Double.nan, .infinity, -.infinity])
    func dateAttributeRejectsANonFiniteDate(t: Double) {
        #expect(queryStatus(["class": .string("keys"), "sdat": .date(t)], for: .add) == .param)
    }

    @Test func dateAttributeKeepsADate() throws {
        #expect(try coerced("keys", "sdat", .date(-86_400.5)) == .date(-86_400.5))
    }

    // MARK: string

    @Test func stringAttributeAcceptsValidUTF8Data() throws {
        #expect(try coerced("genp", "agrp", .data(Array("TEAM.com.example".utf8))) == .string("TEAM.com.example"))
    }

    @Test func stringAttributeFromInvalidUTF8DataIsParam() {
        #expect(queryStatus(["class": .string("genp"), "agrp": .data([0x61, 0xFF])], for: .add) == .param)
    }

    @Test(arguments: [AttributeValue.int(1), .bool(true), .date(0)])
    func stringAttributeRejectsNonText(value: AttributeValue) {
        #expect(queryStatus(["class": .string("genp"), "agrp": value], for: .add) == .param)
    }

    @Test func emptyAccessGroupIsParam() {
        #expect(queryStatus(["class": .string("genp"), "agrp": .string("")], for: .add) == .param)
    }

    @Test func accessGroupIsExposed() throws {
        #expect(try ItemQuery(["class": .string("genp"), "agrp": .string("g")], for: .add).accessGroup == "g")
    }

    // MARK: blob

    @Test(arguments: [AttributeValue.string("alice"), .data([0x61, 0x6C]), .int(12)])
    func blobAttributeKeepsTheTypeItWasGiven(value: AttributeValue) throws {
        #expect(try coerced("genp", "acct", value) == value)
    }

    /// Reference 1.2: blob attributes take CFString, CFData or CFNumber; a CFBoolean is none.
    @Test(arguments: ["acct", "svce", "gena", "labl", "desc", "icmt", "alis", "prot"], [true, false])
    func blobAttributeRejectsABoolean(code: String, value: Bool) {
        #expect(queryStatus(["class": .string("genp"), code: .bool(value)], for: .add) == .param)
    }

    @Test(arguments: [("inet", "srvr"), ("inet", "sdmn"), ("inet", "atyp"), ("inet", "path"), ("keys", "atag"), ("cert", "alis")])
    func blobAttributeOfEveryClassRejectsABoolean(cls: String, code: String) {
        #expect(queryStatus(["class": .string(cls), code: .bool(true)], for: .copyMatching) == .param)
    }

    @Test func blobAttributeRejectsADate() {
        #expect(queryStatus(["class": .string("genp"), "acct": .date(0)], for: .add) == .param)
    }

    // MARK: data

    @Test func dataAttributeTakesAStringAsItsUTF8Bytes() throws {
        #expect(try coerced("keys", "klbl", .string("abc")) == .data([0x61, 0x62, 0x63]))
    }

    /// Reference 1.2, Data row: "CFNumber → 4-byte int".
    @Test func dataAttributeTakesANumberAsAFourByteInteger() throws {
        #expect(try coerced("cert", "pkhh", .int(1)) == .data([1, 0, 0, 0]))
    }

    @Test func dataAttributeRejectsADate() {
        #expect(queryStatus(["class": .string("cert"), "issr": .date(0)], for: .add) == .param)
    }

    // MARK: sizes

    @Test func attributeOfExactly64KiBIsAccepted() throws {
        let value = [UInt8](repeating: 0x41, count: KeychainLimits.maxAttributeBytes)
        #expect(try coerced("genp", "gena", .data(value)) == .data(value))
    }

    @Test func dataAttributeOver64KiBIsParam() {
        let value = [UInt8](repeating: 0x41, count: KeychainLimits.maxAttributeBytes + 1)
        #expect(queryStatus(["class": .string("genp"), "gena": .data(value)], for: .add) == .param)
    }

    @Test func stringAttributeOver64KiBIsParam() {
        let value = String(repeating: "a", count: KeychainLimits.maxAttributeBytes + 1)
        #expect(queryStatus(["class": .string("genp"), "labl": .string(value)], for: .copyMatching) == .param)
    }

    @Test func sizeLimitCountsUTF8BytesNotCharacters() {
        // 32 Ki two-byte characters plus one: 65,538 bytes but only 32,769 characters.
        let value = String(repeating: "é", count: KeychainLimits.maxAttributeBytes / 2 + 1)
        #expect(queryStatus(["class": .string("genp"), "acct": .string(value)], for: .add) == .param)
    }

    // MARK: AttributeSpec directly

    @Test func stringAndDataWithTheSameBytesMatchInABlobAttribute() throws {
        let spec = try #require(ClassSchema.genericPassword.spec("acct"))
        let s = try spec.coerce(.string("bob"))
        let d = try spec.coerce(.data(Array("bob".utf8)))
        #expect(s != d)
        #expect(spec.matchKey(s) == spec.matchKey(d))
    }

    @Test func numberInABlobAttributeIsNotItsDecimalText() throws {
        let spec = try #require(ClassSchema.genericPassword.spec("acct"))
        #expect(spec.matchKey(try spec.coerce(.int(42))) != spec.matchKey(try spec.coerce(.string("42"))))
        #expect(spec.matchKey(try spec.coerce(.int(42))) != spec.matchKey(try spec.coerce(.data(Array("42".utf8)))))
        #expect(spec.matchKey(try spec.coerce(.int(42))) == spec.matchKey(try spec.coerce(.int(42))))
    }

    @Test func legacyMatchBytesOfABlobNumberAreItsDecimalText() throws {
        let spec = try #require(ClassSchema.genericPassword.spec("acct"))
        #expect(spec.legacyMatchBytes(.int(42)) == Array("42".utf8))
    }

    @Test func numberAttributesCompareByValue() throws {
        let spec = try #require(ClassSchema.internetPassword.spec("port"))
        #expect(spec.matchKey(try spec.coerce(.string("443"))) == spec.matchKey(try spec.coerce(.int(443))))
        #expect(spec.matchKey(AttributeValue.int(443)) != spec.matchKey(AttributeValue.int(444)))
    }

    @Test func primaryKeyDefaultsFollowTheKind() throws {
        #expect(try #require(ClassSchema.genericPassword.spec("acct")).defaultValue == .string(""))
        #expect(try #require(ClassSchema.certificate.spec("issr")).defaultValue == .data([]))
        #expect(try #require(ClassSchema.internetPassword.spec("port")).defaultValue == .int(0))
        #expect(try #require(ClassSchema.key.spec("sdat")).defaultValue == .date(0))
    }
}

/// keychain-semantics.md 1.8.
@Suite struct ClassSchemaTests {
    @Test func genericPasswordPrimaryKeyIsAccountAndService() {
        #expect(ClassSchema.genericPassword.primaryKey.map(\.code) == ["acct", "svce"])
    }

    @Test func internetPasswordPrimaryKey() {
        #expect(ClassSchema.internetPassword.primaryKey.map(\.code) == ["acct", "sdmn", "srvr", "ptcl", "atyp", "port", "path"])
    }

    @Test func certificatePrimaryKey() {
        #expect(ClassSchema.certificate.primaryKey.map(\.code) == ["ctyp", "issr", "slnr"])
    }

    @Test func keyPrimaryKey() {
        #expect(ClassSchema.key.primaryKey.map(\.code) == ["kcls", "klbl", "atag", "type", "crtr", "bsiz", "esiz", "sdat", "edat"])
    }

    @Test(arguments: ItemClass.stored)
    func pdmnLabelAndGenericAreNotInThePrimaryKey(itemClass: ItemClass) throws {
        let schema = try #require(ClassSchema.of(itemClass))
        let pk = Set(schema.primaryKey.map(\.code))
        #expect(pk.isDisjoint(with: ["pdmn", "labl", "gena", "desc"]))
    }

    @Test(arguments: ItemClass.stored)
    func everyClassHasTheCommonAttributes(itemClass: ItemClass) throws {
        let schema = try #require(ClassSchema.of(itemClass))
        for code in ["cdat", "mdat", "labl", "agrp", "pdmn", "sync"] {
            #expect(schema.spec(code) != nil, "\(itemClass.rawValue) lacks \(code)")
        }
    }

    @Test func plainColumnsAreNotHashed() {
        #expect(ClassSchema.allHashedColumns.allSatisfy { !ClassSchema.plainColumns.contains($0) })
        #expect(Set(ClassSchema.allHashedColumns).count == ClassSchema.allHashedColumns.count)
    }
}

/// keychain-semantics.md 4.9: the second dictionary of SecItemUpdate.
@Suite struct ItemChangesTests {
    private func changesStatus(_ dict: AttributeDictionary, _ cls: ItemClass = .genericPassword) -> KeychainStatus? {
        thrownStatus { () throws(KeychainError) in try ItemChanges(dict, for: cls) }
    }

    @Test func classKeyIsNoSuchAttr() {
        #expect(changesStatus(["class": .string("genp")]) == .noSuchAttribute)
    }

    @Test(arguments: ["r_Data", "m_Limit", "u_OpPrompt", "srvr"])
    func otherNonAttributeKeysAreNoSuchAttr(key: String) {
        #expect(changesStatus([key: .bool(true)]) == .noSuchAttribute)
    }

    /// securityd sets both dates itself on update: a given date is accepted and has no effect.
    @Test(arguments: ["cdat", "mdat"])
    func dateStampsInChangesAreAcceptedAndIgnored(key: String) throws {
        let c = try ItemChanges([key: .date(1), "labl": .string("L")], for: .genericPassword)
        #expect(c.attributes == ["labl": .string("L")])
    }

    @Test(arguments: ["cdat", "mdat"])
    func dateStampsInChangesMustStillBeDates(key: String) {
        #expect(changesStatus([key: .string("yesterday")]) == .param)
    }

    @Test func emptyChangesAreParam() {
        #expect(changesStatus([:]) == .param)
    }

    @Test func attributesAreCoercedAsInQueries() throws {
        let c = try ItemChanges(["port": .string("8080"), "sync": .bool(true), "labl": .string("L")], for: .internetPassword)
        #expect(c.attributes == ["port": .int(8080), "sync": .int(1), "labl": .string("L")])
        #expect(c.data == nil)
    }

    @Test func valueDataIsTheNewSecret() throws {
        let c = try ItemChanges(["v_Data": .data([4, 5])], for: .genericPassword)
        #expect(c.data == [4, 5])
        #expect(c.attributes.isEmpty)
        #expect(!c.isEmpty)
    }

    @Test func valueDataMustBeData() {
        #expect(changesStatus(["v_Data": .string("pw")]) == .param)
    }

    @Test func valueDataOverOneMebibyteIsParam() {
        #expect(changesStatus(["v_Data": .data([UInt8](repeating: 0, count: KeychainLimits.maxSecretBytes + 1))]) == .param)
    }

    @Test func syncAnyIsParam() {
        #expect(changesStatus(["sync": .string("syna")]) == .param)
    }

    @Test func invalidPdmnIsParam() {
        #expect(changesStatus(["pdmn": .string("zz")]) == .param)
    }

    @Test func nlegAloneLeavesNothingToChange() throws {
        let c = try ItemChanges(["nleg": .bool(true)], for: .genericPassword)
        #expect(c.isEmpty)
    }

    @Test func moreThan128KeysIsParam() {
        var dict: AttributeDictionary = [:]
        for i in 0..<129 { dict["x\(i)"] = .bool(true) }
        #expect(changesStatus(dict) == .param)
    }
}
