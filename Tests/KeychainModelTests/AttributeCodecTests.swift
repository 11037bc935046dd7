import Testing
import KeychainModel

/// Hand-written encodings, so the tests do not depend on the encoder they check.
private enum Raw {
    static func entry(key: [UInt8], tag: UInt8, value: [UInt8]) -> [UInt8] {
        var w = ByteWriter()
        w.u16(UInt16(key.count))
        w.raw(key)
        w.u8(tag)
        w.raw(value)
        return w.bytes
    }

    static func lengthPrefixed(_ bytes: [UInt8]) -> [UInt8] {
        var w = ByteWriter()
        w.lengthPrefixed(bytes)
        return w.bytes
    }

    static func dictionary(_ entries: [[UInt8]], count: UInt32? = nil) -> [UInt8] {
        var w = ByteWriter()
        w.u32(count ?? UInt32(entries.count))
        for e in entries { w.raw(e) }
        return w.bytes
    }

    static func stringEntry(_ key: String, _ value: [UInt8]) -> [UInt8] {
        entry(key: Array(key.utf8), tag: 1, value: lengthPrefixed(value))
    }
}

@Suite struct AttributeCodecTests {
    static let everyValueType: [AttributeValue] = [
        .string(""), .string("account"), .string("naïve ☃︎ 🔑"),
        .data([]), .data([0x00, 0xFF, 0x80, 0x7F]),
        .int(0), .int(-1), .int(443), .int(.max), .int(.min),
        .bool(true), .bool(false),
        .date(0), .date(-1.5), .date(760_000_000.125), .date(.greatestFiniteMagnitude),
    ]

    @Test(arguments: everyValueType)
    func roundTripsEachValueType(value: AttributeValue) throws {
        let dict: AttributeDictionary = ["acct": value]
        let decoded = try AttributeCodec.decode(AttributeCodec.encode(dict), failure: .decode)
        #expect(decoded == dict)
    }

    @Test func roundTripsADictionaryHoldingEveryTypeAtOnce() throws {
        let dict: AttributeDictionary = [
            "acct": .string("alice"), "gena": .data([1, 2, 3]), "port": .int(8443),
            "invi": .bool(true), "cdat": .date(12.5), "v_Data": .data(Array(repeating: 7, count: 1000)),
        ]
        #expect(try AttributeCodec.decode(AttributeCodec.encode(dict), failure: .param) == dict)
    }

    @Test func roundTripsTheEmptyDictionary() throws {
        let bytes = AttributeCodec.encode([:])
        #expect(bytes == [0, 0, 0, 0])
        #expect(try AttributeCodec.decode(bytes, failure: .decode).isEmpty)
    }

    @Test func keepsAStringAndDataWithTheSameBytesApart() throws {
        let dict: AttributeDictionary = ["acct": .string("x"), "svce": .data(Array("x".utf8))]
        let decoded = try AttributeCodec.decode(AttributeCodec.encode(dict), failure: .decode)
        #expect(decoded["acct"] == .string("x"))
        #expect(decoded["svce"] == .data([0x78]))
    }

    @Test func encodesInTheDocumentedLittleEndianLayout() {
        let bytes = AttributeCodec.encode(["acct": .string("x"), "port": .int(258)])
        let expected: [UInt8] = [2, 0, 0, 0]
            + [4, 0] + Array("acct".utf8) + [1] + [1, 0, 0, 0] + [0x78]
            + [4, 0] + Array("port".utf8) + [3] + [2, 1, 0, 0, 0, 0, 0, 0]
        #expect(bytes == expected)
    }

    @Test func encodesBooleansAndDatesAsDocumented() {
        var w = ByteWriter()
        AttributeCodec.encodeValue(.bool(true), into: &w)
        AttributeCodec.encodeValue(.date(1.0), into: &w)
        // 1.0 as IEEE 754 double is 0x3FF0000000000000.
        #expect(w.bytes == [4, 1] + [5, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F])
    }

    @Test func encodingIsCanonicalWhateverTheInsertionOrder() {
        let keys = (0..<40).map { "k\($0)" }
        var forward: AttributeDictionary = [:]
        for (i, k) in keys.enumerated() { forward[k] = .int(Int64(i)) }
        var backward: AttributeDictionary = [:]
        backward.reserveCapacity(500)  // a different capacity gives a different iteration order
        for (i, k) in keys.enumerated().reversed() { backward[k] = .int(Int64(i)) }
        #expect(forward == backward)
        #expect(AttributeCodec.encode(forward) == AttributeCodec.encode(backward))
    }

    @Test func encodingWritesKeysInSortedOrder() {
        let bytes = AttributeCodec.encode(["svce": .bool(true), "acct": .bool(false)])
        let acct = [4, 0] + Array("acct".utf8) + [4, 0]
        let svce = [4, 0] + Array("svce".utf8) + [4, 1]
        #expect(bytes == [2, 0, 0, 0] + acct + svce)
    }

    @Test(arguments: [KeychainStatus.param, .decode])
    func decodeRejectsEveryTruncationWithTheChosenStatus(failure: KeychainStatus) {
        let full = AttributeCodec.encode([
            "acct": .string("alice"), "gena": .data([9, 9]), "port": .int(1),
            "invi": .bool(false), "cdat": .date(3),
        ])
        for length in 0..<full.count {
            let prefix = Array(full.prefix(length))
            #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(prefix, failure: failure) } == failure,
                    "prefix of \(length) bytes")
        }
    }

    @Test(arguments: [KeychainStatus.param, .decode])
    func decodeRejectsInvalidUTF8InAKey(failure: KeychainStatus) {
        let bytes = Raw.dictionary([Raw.entry(key: [0x61, 0xC3, 0x28, 0x62], tag: 4, value: [1])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: failure) } == failure)
    }

    @Test(arguments: [KeychainStatus.param, .decode])
    func decodeRejectsInvalidUTF8InAStringValue(failure: KeychainStatus) {
        let bytes = Raw.dictionary([Raw.stringEntry("acct", [0x66, 0xFF, 0x6F])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: failure) } == failure)
    }

    @Test func invalidUTF8IsAcceptedInADataValue() throws {
        let bytes = Raw.dictionary([Raw.entry(key: Array("gena".utf8), tag: 2, value: Raw.lengthPrefixed([0xFF, 0xFE]))])
        #expect(try AttributeCodec.decode(bytes, failure: .decode) == ["gena": .data([0xFF, 0xFE])])
    }

    @Test(arguments: [KeychainStatus.param, .decode])
    func decodeRejectsADuplicateKey(failure: KeychainStatus) {
        let bytes = Raw.dictionary([Raw.stringEntry("acct", [0x61]), Raw.stringEntry("acct", [0x62])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: failure) } == failure)
    }

    @Test(arguments: [UInt8(0), 6, 0x7F, 0xFF])
    func decodeRejectsAnUnknownTypeTag(tag: UInt8) {
        let bytes = Raw.dictionary([Raw.entry(key: Array("acct".utf8), tag: tag, value: [0, 0, 0, 0, 0, 0, 0, 0])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .decode) } == .decode)
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .param) } == .param)
    }

    @Test func decodeRejectsABooleanOtherThanZeroOrOne() {
        let bytes = Raw.dictionary([Raw.entry(key: Array("invi".utf8), tag: 4, value: [2])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .decode) } == .decode)
    }

    @Test(arguments: [KeychainStatus.param, .decode])
    func decodeRejectsAValueOneByteOverTheOneMebibyteDefaultLimit(failure: KeychainStatus) {
        let oversize = Raw.dictionary([Raw.entry(key: Array("v_Data".utf8), tag: 2,
                                                 value: Raw.lengthPrefixed([UInt8](repeating: 1, count: KeychainLimits.maxSecretBytes + 1)))])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(oversize, failure: failure) } == failure)
    }

    @Test func decodeAcceptsAValueOfExactlyOneMebibyte() throws {
        let value = [UInt8](repeating: 1, count: KeychainLimits.maxSecretBytes)
        let bytes = Raw.dictionary([Raw.entry(key: Array("v_Data".utf8), tag: 2, value: Raw.lengthPrefixed(value))])
        #expect(try AttributeCodec.decode(bytes, failure: .decode)["v_Data"] == .data(value))
    }

    @Test func decodeRejectsAStringLongerThanTheCallersLimit() {
        let bytes = Raw.dictionary([Raw.stringEntry("acct", Array("123456789".utf8))])
        var r = ByteReader(bytes, failure: .param)
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(from: &r, maxValueBytes: 8) } == .param)
        var ok = ByteReader(bytes, failure: .param)
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(from: &ok, maxValueBytes: 9) } == nil)
    }

    @Test func decodeRejectsAHugeClaimedLengthWithoutTheBytes() {
        let bytes = Raw.dictionary([Raw.entry(key: Array("gena".utf8), tag: 2, value: [0xFF, 0xFF, 0xFF, 0xFF])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .decode) } == .decode)
    }

    @Test func decodeRejectsMoreEntriesThanTheLimit() {
        let entries = (0..<129).map { Raw.entry(key: Array("k\($0)".utf8), tag: 4, value: [0]) }
        let bytes = Raw.dictionary(entries)
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .param) } == .param)
        let atLimit = Raw.dictionary(Array(entries.prefix(128)))
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(atLimit, failure: .param) } == nil)
    }

    @Test func decodeRejectsAHugeClaimedEntryCount() {
        let bytes = Raw.dictionary([], count: .max)
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .decode) } == .decode)
    }

    @Test func decodeRejectsAnEmptyKey() {
        let bytes = Raw.dictionary([Raw.entry(key: [], tag: 4, value: [0])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .decode) } == .decode)
    }

    @Test func decodeRejectsAKeyLongerThanSixtyFourBytes() {
        let long = Raw.dictionary([Raw.entry(key: [UInt8](repeating: 0x61, count: 65), tag: 4, value: [0])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(long, failure: .decode) } == .decode)
        let max = Raw.dictionary([Raw.entry(key: [UInt8](repeating: 0x61, count: 64), tag: 4, value: [0])])
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(max, failure: .decode) } == nil)
    }

    @Test func decodeRejectsTrailingBytes() {
        let bytes = AttributeCodec.encode(["acct": .string("a")]) + [0]
        #expect(thrownStatus { () throws(KeychainError) in try AttributeCodec.decode(bytes, failure: .decode) } == .decode)
    }

    @Test func decodeFromAReaderStopsAfterTheDictionary() throws {
        let bytes = AttributeCodec.encode(["acct": .string("a")]) + [0xEE]
        var r = ByteReader(bytes, failure: .decode)
        #expect(try AttributeCodec.decode(from: &r) == ["acct": .string("a")])
        #expect(r.remaining == 1)
        #expect(try r.u8() == 0xEE)
    }
}

@Suite struct ByteReaderWriterTests {
    @Test func writerIsLittleEndian() {
        var w = ByteWriter()
        w.u16(0x0102)
        w.u32(0x0304_0506)
        w.u64(0x0708_090A_0B0C_0D0E)
        #expect(w.bytes == [2, 1, 6, 5, 4, 3, 0x0E, 0x0D, 0x0C, 0x0B, 0x0A, 9, 8, 7])
    }

    @Test func readerReadsWhatTheWriterWrote() throws {
        var w = ByteWriter()
        w.u8(0xAB)
        w.u16(0xBEEF)
        w.u32(0xDEAD_BEEF)
        w.u64(.max - 1)
        w.lengthPrefixed([1, 2, 3])
        var r = ByteReader(w.bytes, failure: .decode)
        #expect(try r.u8() == 0xAB)
        #expect(try r.u16() == 0xBEEF)
        #expect(try r.u32() == 0xDEAD_BEEF)
        #expect(try r.u64() == .max - 1)
        #expect(try r.lengthPrefixed(max: 3) == [1, 2, 3])
        #expect(r.isAtEnd)
    }

    @Test(arguments: [KeychainStatus.param, .decode, .io])
    func shortReadThrowsTheStatusTheCallerChose(failure: KeychainStatus) {
        var r = ByteReader([1, 2, 3], failure: failure)
        #expect(thrownStatus { () throws(KeychainError) in try r.u32() } == failure)
    }

    @Test func failedReadConsumesNothing() throws {
        var r = ByteReader([1, 2, 3], failure: .decode)
        _ = try? r.u32()
        #expect(r.offset == 0)
        #expect(try r.u16() == 0x0201)
    }

    @Test func negativeTakeIsRejected() {
        var r = ByteReader([1, 2, 3], failure: .decode)
        #expect(thrownStatus { () throws(KeychainError) in try r.take(-1) } == .decode)
    }

    @Test func lengthPrefixedRejectsALengthOverTheLimitEvenWhenTheBytesArePresent() {
        var w = ByteWriter()
        w.lengthPrefixed([1, 2, 3, 4])
        var r = ByteReader(w.bytes, failure: .param)
        #expect(thrownStatus { () throws(KeychainError) in try r.lengthPrefixed(max: 3) } == .param)
    }
}
