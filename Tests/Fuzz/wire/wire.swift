// libFuzzer target: the payload decoders of both directions (Sources/KeychainProtocol/
// Messages.swift): requests, which the daemon decodes from any local user, and responses,
// which a client decodes from whatever listens on its socket path. Each must give a value or
// a KeychainError (errSecParam, errSecDecode, errSecUnimplemented), and a value that decodes
// must encode to bytes that decode to it again. A request's dictionaries then go through the
// SecItem grammar the store applies next (ItemQuery, ItemChanges).
import KeychainModel
import KeychainProtocol

/// The statuses a malformed request may give: anything else would tell the caller something
/// other than "your request is wrong".
let requestStatuses: Set<KeychainStatus> = [.param, .unimplemented]

/// Compared as bytes, not as values: a date may be NaN, which equals nothing, itself included.
func bytes(_ s: SecretBytes) -> [UInt8] { s.withUnsafeBytes { Array($0) } }

func checkRequest(_ payload: SecretBytes) {
    let request: Request
    do {
        request = try WireCodec.decodeRequest(payload)
    } catch {
        require(requestStatuses.contains(error.status), "a request failed with \(error.status)")
        return
    }
    let encoded = WireCodec.encode(request)
    let again = try? WireCodec.decodeRequest(encoded)
    require(again.map { bytes(WireCodec.encode($0)) } == bytes(encoded), "a request does not survive re-encoding")
    switch request {
    case .add(let d): _ = try? ItemQuery(d, for: .add)
    case .copyMatching(let d): _ = try? ItemQuery(d, for: .copyMatching)
    case .delete(let d): _ = try? ItemQuery(d, for: .delete)
    case .update(let q, let c):
        if let query = try? ItemQuery(q, for: .update) { _ = try? ItemChanges(c, for: query.itemClass) }
    case .keyGenerate(let d): _ = try? ItemQuery(d.merging(["class": .string("keys")]) { $1 }, for: .add)
    default: break
    }
}

func checkResponse(_ payload: SecretBytes) {
    guard let response = try? WireCodec.decodeResponse(payload) else { return }
    let encoded = WireCodec.encode(response)
    let again = try? WireCodec.decodeResponse(encoded)
    require(again.map { bytes(WireCodec.encode($0)) } == bytes(encoded), "a response does not survive re-encoding")
    _ = response.error
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let payload = SecretBytes(UnsafeBufferPointer(start: data, count: size))
    checkRequest(payload)
    checkResponse(payload)
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        let item: AttributeDictionary = [
            "class": .string("genp"), "svce": .string("fuzz.example"), "acct": .string("alice"),
            "v_Data": .data(Array("hunter2".utf8)), "pdmn": .string("ak"), "sync": .bool(false),
        ]
        let query: AttributeDictionary = [
            "class": .string("inet"), "srvr": .string("example.com"), "port": .int(443),
            "m_Limit": .string("m_LimitAll"), "r_Attributes": .bool(true), "mdat": .date(785_000_000.5),
        ]
        let requests: [(String, Request)] = [
            ("add", .add(item)),
            ("copy-matching", .copyMatching(query)),
            ("update", .update(query: ["class": .string("genp"), "svce": .string("fuzz.example")],
                               changes: ["v_Data": .data(Array("new".utf8)), "labl": .string("label")])),
            ("delete", .delete(["class": .string("keys"), "kcls": .int(1)])),
            ("status", .status),
            ("lock", .lock),
            ("unlock", .unlock(passcode: SecretBytes(Array("1234".utf8)))),
            ("change-passcode", .changePasscode(old: SecretBytes(Array("1234".utf8)), new: SecretBytes(Array("5678".utf8)))),
            ("backup-read", .backupRead(session: 7, offset: 1 << 19)),
            ("restore-write", .restoreWrite(session: 7, offset: 0, bytes: Array("KCBACKUP".utf8))),
            ("restore-commit", .restoreCommit(session: 7, password: SecretBytes(Array("pw".utf8)), onConflict: .replace)),
            ("as-caller-search", .asCaller(pid: 4242, startTime: 1_234_567, inner: .attributeSearch(
                collection: "login", exact: false, pairs: try! SecretServiceAttributes(["xdg:schema": "org.example", "user": "me"])))),
            ("as-caller-add", .asCaller(pid: 4242, startTime: 1_234_567, inner: .attributeAdd(
                ["class": .string("genp"), "svce": .string("secret-service:login"), "v_Data": .data(Array("pw".utf8)),
                 "xsat": .data(try! SecretServiceAttributes(["user": "me"]).encoded)], replace: true))),
            ("as-caller-portal", .asCaller(pid: 4242, startTime: 1_234_567, inner: .portalSecret(appID: "org.example.App"))),
            ("key-generate", .keyGenerate(["type": .int(105), "labl": .string("k"), "atag": .data(Array("ssh".utf8))])),
            ("key-sign", .keySign(query: ["labl": .string("k")],
                                  parameters: ["algorithm": .string("algid:sign:EdDSA:message-Ed25519"), "data": .data([1, 2, 3])])),
            ("key-agree", .keyAgree(query: ["v_PersistentRef": .data(Array("keys".utf8) + [UInt8](repeating: 9, count: 16))],
                                    parameters: ["algorithm": .string("algid:keyexchange:ECDH:KDFX963:SHA256"),
                                                 "peer": .data([UInt8](repeating: 9, count: 32)), "requestedSize": .int(32)])),
            ("sync-status", .syncStatus),
            ("sync-join", .syncJoin(circle: "0421 7730 9912 0000 1111 2222 3333 4444", name: "laptop")),
            ("sync-approve", .syncApprove(device: String(repeating: "7", count: 32))),
            ("sync-remove", .syncRemove(device: String(repeating: "7", count: 32))),
            ("sync-leave", .syncLeave),
            ("sync-create", .syncCreate(name: "workstation")),
            ("sync-devices", .syncDevices),
            ("sync-now", .syncNow),
        ]
        let responses: [(String, Response)] = [
            ("ok", Response()),
            ("error", Response(error: KeychainError(.itemNotFound, "the item could not be found"))),
            ("single", Response(result: .single(.data(Array("hunter2".utf8))))),
            ("list-page", Response(result: .list([.attributes(query), .persistentRef(Array("genp".utf8) + [UInt8](repeating: 1, count: 16))]),
                                   continues: true)),
        ]
        return requests.map { Seed("request-\($0.0)", bytes(WireCodec.encode($0.1))) }
            + responses.map { Seed("response-\($0.0)", bytes(WireCodec.encode($0.1))) }
    }
    return 0
}
