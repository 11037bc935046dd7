import KeychainModel
import KeychainProtocol

/// Tests write passcodes and passwords as plain arrays; requests carry them as SecretBytes.
extension Request {
    static func unlock(passcode: [UInt8]) -> Request { .unlock(passcode: SecretBytes(passcode)) }
    static func setPasscode(new: [UInt8]) -> Request { .setPasscode(new: SecretBytes(new)) }
    static func changePasscode(old: [UInt8], new: [UInt8]) -> Request { .changePasscode(old: SecretBytes(old), new: SecretBytes(new)) }
    static func removePasscode(current: [UInt8]) -> Request { .removePasscode(current: SecretBytes(current)) }
    static func backupBegin(password: [UInt8]) -> Request { .backupBegin(password: SecretBytes(password)) }
}

extension WireCodec {
    static func decodeRequest(_ payload: [UInt8]) throws(KeychainError) -> Request { try decodeRequest(SecretBytes(payload)) }
    static func decodeResponse(_ payload: [UInt8]) throws(KeychainError) -> Response { try decodeResponse(SecretBytes(payload)) }
}
