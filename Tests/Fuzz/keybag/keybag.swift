// libFuzzer target: the persisted keybag record (Sources/KeychainCrypto/Keybag.swift).
// The record is read from the database before anything is authenticated: its parser must turn
// every byte string into a record or a KeychainError. A record that parses is then opened with
// a fixed device key, which runs the AEAD over each wrapped class key (they open only where
// the fuzzer left a seed's keys intact). No Argon2id runs: a passcode is never tried.
import KeychainCrypto
import KeychainModel

/// The device key the seeds' class keys are wrapped under.
let deviceKey: SecureKey = {
    var bytes = [UInt8](repeating: 0x5a, count: SecureKey.byteCount)
    return SecureKey.taking(&bytes)
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let record = try? KeybagRecord(decoding: bytes) else { return 0 }
    // What the store writes back must read as the same record.
    let again = try? KeybagRecord(decoding: record.encoded())
    require(again == record, "a keybag record does not survive re-encoding")
    _ = try? Keybag(deviceKey: deviceKey, record: record)
    return 0
}

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    writeSeedsIfAsked {
        // The two records a keychain has: before and after a passcode is set (the fast KDF
        // cost, so that a record's parameters cost nothing should a later target use them).
        let plain = try! Keybag.create(deviceKey: deviceKey)
        var locked = plain
        try! locked.setPasscode(Array("1234".utf8), parameters: .testingOnly, deviceKey: deviceKey)
        let withPasscode = locked.record.encoded()
        return [
            Seed("no-passcode", plain.record.encoded()),
            Seed("passcode", withPasscode),
            Seed("truncated", Array(withPasscode.dropLast(7))),
        ]
    }
    return 0
}
