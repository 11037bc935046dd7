// libFuzzer target: the attribute dictionary codec (Sources/KeychainModel/ByteCoding.swift,
// AttributeValue.swift) and the SecItem grammar that reads a decoded dictionary
// (ItemQuery.swift, AttributeSchema.swift): the path every item call and every stored item's
// plaintext takes. The first byte says which error status the reader is built with (requests
// are errSecParam, stored items errSecDecode); a decoded dictionary must re-encode to the same
// canonical bytes and then pass, or be refused by, each operation's grammar.
import KeychainModel

func bytes(_ s: SecretBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 1 else { return 0 }
    let input = UnsafeBufferPointer(start: data, count: size)
    let failure: KeychainStatus = input[0] & 1 == 0 ? .param : .decode
    let dict: AttributeDictionary
    do {
        dict = try AttributeCodec.decode(SecretBytes(input[1...]), failure: failure)
    } catch {
        require(error.status == failure, "the codec failed with \(error.status), not \(failure)")
        return 0
    }
    // Keys are written sorted, so one dictionary has one encoding (compared as bytes: a date
    // may be NaN, which equals nothing).
    let encoded = AttributeCodec.encode(dict)
    let again = try? AttributeCodec.decode(encoded, failure: failure)
    require(again.map { bytes(AttributeCodec.encode($0)) } == bytes(encoded), "a dictionary does not survive re-encoding")
    for operation in [ItemOperation.add, .copyMatching, .update, .delete] {
        guard let query = try? ItemQuery(dict, for: operation) else { continue }
        if operation == .update { _ = try? ItemChanges(dict, for: query.itemClass) }
    }
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        let dictionaries: [(String, AttributeDictionary)] = [
            ("empty", [:]),
            ("generic-password", ["class": .string("genp"), "svce": .string("fuzz.example"), "acct": .string("alice"),
                                  "v_Data": .data(Array("hunter2".utf8)), "pdmn": .string("cku"), "sync": .bool(true)]),
            ("internet-query", ["class": .string("inet"), "srvr": .string("example.com"), "port": .int(443),
                                "ptcl": .string("htps"), "m_Limit": .int(5), "r_Data": .bool(true), "r_Attributes": .bool(true)]),
            ("certificate", ["class": .string("cert"), "ctyp": .int(3), "issr": .data([0x30, 0x0d]), "slnr": .data([1, 2, 3]),
                             "cdat": .date(785_000_000.25), "agrp": .string("group.one")]),
            ("key-by-ref", ["v_PersistentRef": .data(Array("keys".utf8) + [UInt8](repeating: 9, count: 16)),
                            "r_PersistentRef": .bool(true), "u_AuthUI": .string("u_AuthUIFail")]),
            ("non-ascii", ["class": .string("genp"), "labl": .string("caf\u{e9} \u{1f511}"), "svce": .string("\u{4e2d}")]),
        ]
        return dictionaries.flatMap { name, dict in
            let encoded = bytes(AttributeCodec.encode(dict))
            return [Seed("request-\(name)", [0] + encoded), Seed("stored-\(name)", [1] + encoded)]
        }
    }
    return 0
}
