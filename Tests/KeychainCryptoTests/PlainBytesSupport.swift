import KeychainModel

/// Tests compare with plain arrays; the crypto layer returns SecretBytes.
extension SecretBytes {
    static func == (a: SecretBytes, b: [UInt8]) -> Bool { Array(a) == b }
}

func == (a: SecretBytes?, b: [UInt8]) -> Bool { a.map { Array($0) == b } ?? false }
