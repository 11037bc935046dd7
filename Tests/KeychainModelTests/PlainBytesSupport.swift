import KeychainModel

/// Tests compare and decode with plain arrays; the model holds SecretBytes.
extension SecretBytes {
    static func == (a: SecretBytes, b: [UInt8]) -> Bool { Array(a) == b }
}

extension AttributeCodec {
    static func decode(_ bytes: [UInt8], failure: KeychainStatus) throws(KeychainError) -> AttributeDictionary {
        try decode(SecretBytes(bytes), failure: failure)
    }
}
