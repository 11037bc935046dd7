import KeychainCrypto
import Testing

@Suite("Streamed keyed hashes")
struct KeyedHashStreamingTests {
    /// Lookup columns written before the streaming change must still match: the streamed hash
    /// is the hash of the concatenation.
    @Test(arguments: ["acct", "svce", "keyid", ""])
    func streamingEqualsHashingTheConcatenation(domain: String) {
        let key = SecureKey.random()
        for message in [[], [0], Array("alice@example.com".utf8), [UInt8](repeating: 7, count: 300)] as [[UInt8]] {
            #expect(KeyedHash.hash(domain: domain, message, key: key, outputBytes: 16)
                    == KeyedHash.hash(Array(domain.utf8) + [0] + message, key: key, outputBytes: 16))
        }
    }
}
