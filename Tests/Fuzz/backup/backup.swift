// libFuzzer target: the backup file (Sources/KeychainCrypto/BackupFile.swift) and the payload
// inside it (BackupPayload, Sources/KeychainStore/ItemStore+Backup.swift).
// The container is parsed before anything is authenticated: header(of:) and open() must give a
// header, a payload or a KeychainError for any bytes. open() runs Argon2id with the file's own
// parameters, so it is only called when they are the fast testing cost the seeds use (a file
// may legitimately ask for 4 GiB, which is what the daemon allows but no fuzzer can afford per
// input). The AEAD then refuses any change to a seed, so the payload decoder, which reads only
// authenticated bytes, is fuzzed on the whole input as well.
import KeychainCrypto
import KeychainModel
import KeychainStore

let password = Array("fuzz-password".utf8)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let file = Array(UnsafeBufferPointer(start: data, count: size))
    if let header = try? BackupFile.header(of: file), header.argon2 == .testingOnly {
        if let (_, payload) = try? BackupFile.open(file, password: password) {
            _ = try? BackupPayload.decode(payload)
        }
    }
    _ = try? BackupPayload.decode(SecretBytes(file))
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        let items: [AttributeDictionary] = [
            ["class": .string("genp"), "svce": .string("fuzz.example"), "acct": .string("alice"),
             "v_Data": .data(Array("hunter2".utf8)), "agrp": .string("owner"), "pdmn": .string("ak"),
             "cdat": .date(785_000_000), "mdat": .date(785_000_001), "sync": .int(0)],
            ["class": .string("inet"), "srvr": .string("example.com"), "port": .int(443), "ptcl": .string("htps"),
             "v_Data": .data([0, 1, 2, 3]), "agrp": .string("owner"), "pdmn": .string("dk"),
             "cdat": .date(785_000_000), "mdat": .date(785_000_000), "sync": .int(0)],
        ]
        let payload = BackupPayload.encode(items)
        func sealed(_ payload: SecretBytes, items: Int, excluded: Int, note: String) -> [UInt8] {
            try! BackupFile.seal(payload: payload, itemCount: items, excludedCount: excluded, note: note,
                                 password: password, parameters: .testingOnly)
        }
        let two = sealed(payload, items: 2, excluded: 1, note: "1 item is ThisDeviceOnly and stays on this device")
        return [
            Seed("two-items", two),
            Seed("empty", sealed(BackupPayload.encode([]), items: 0, excluded: 0, note: "")),
            Seed("header-only", Array(two.prefix(8 + 2 + 1 + 8 + 8 + 16 + 4 + 4 + 4))),
            Seed("payload", payload.withUnsafeBytes { Array($0) }),
        ]
    }
    return 0
}
