import KeychainModel

/// The encrypted backup file (docs/backup-format.md):
///
///     "KCBACKUP"                       8 bytes, magic
///     u16 format version (1)
///     u8  KDF (1 = Argon2id v1.3), u64 opslimit, u64 memlimit (bytes), 16-byte salt
///     u32 items in the file
///     u32 items left out (ThisDeviceOnly), u32 length + UTF-8 note saying why
///     u32 length + XChaCha20-Poly1305(nonce || ciphertext || tag) of the payload,
///         key = Argon2id(backup password, salt), associated data = every header byte above
///
/// One AEAD over the whole payload with the header as associated data: a wrong password, a
/// truncated file or any flipped bit anywhere fails as one error, before anything is restored.
public enum BackupFile {
    public static let magic = Array("KCBACKUP".utf8)
    public static let formatVersion: UInt16 = 1

    public struct Header: Sendable, Equatable {
        public var itemCount: Int
        public var excludedCount: Int
        public var note: String
        public var argon2: Argon2Parameters
        var salt: [UInt8]
    }

    /// Seals `payload` (the encoded items) under `password`.
    public static func seal(payload: some ContiguousByteBuffer, itemCount: Int, excludedCount: Int, note: String,
                            password: some ContiguousByteBuffer, parameters: Argon2Parameters) throws(KeychainError) -> [UInt8] {
        try seal(payload: payload, itemCount: itemCount, excludedCount: excludedCount, note: note, password: password,
                 parameters: parameters, salt: Sodium.randomBytes(Argon2Parameters.saltBytes),
                 nonce: Sodium.randomBytes(AEAD.nonceBytes))
    }

    /// The file for a given salt and nonce: how golden-vector tests (@testable) pin the format
    /// byte for byte. The product always seals with random ones, above.
    static func seal(payload: some ContiguousByteBuffer, itemCount: Int, excludedCount: Int, note: String,
                     password: some ContiguousByteBuffer, parameters: Argon2Parameters,
                     salt: [UInt8], nonce: [UInt8]) throws(KeychainError) -> [UInt8] {
        let header = encodeHeader(Header(itemCount: itemCount, excludedCount: excludedCount, note: note,
                                         argon2: parameters, salt: salt))
        let key = try PasswordKDF.derive(passcode: password, salt: salt, parameters: parameters)
        var w = ByteWriter(capacity: header.count + payload.count + 64)
        w.raw(header)
        w.lengthPrefixed(AEAD.seal(payload, associatedData: header, key: key, nonce: nonce))
        return w.bytes
    }

    /// Reads the header only (no password needed): for messages and summaries.
    public static func header(of file: [UInt8]) throws(KeychainError) -> Header {
        var r = ByteReader(file, failure: .decode)
        return try readHeader(&r)
    }

    /// The payload, or: errSecUnimplemented for a newer format, errSecDecode for a damaged
    /// file, errSecAuthFailed for a wrong password (the two cannot be told apart for certain:
    /// a damaged ciphertext also fails to open; the message says both).
    public static func open(_ file: [UInt8], password: some ContiguousByteBuffer) throws(KeychainError) -> (Header, SecretBytes) {
        var r = ByteReader(file, failure: .decode)
        let header = try readHeader(&r)
        let headerBytes = Array(file[0..<r.offset])
        let sealed = try r.lengthPrefixedArray(max: file.count)
        guard r.isAtEnd else { throw KeychainError(.decode, "the backup file has trailing bytes: it is damaged") }
        let key = try PasswordKDF.derive(passcode: password, salt: header.salt, parameters: header.argon2)
        guard let payload = AEAD.open(sealed, associatedData: headerBytes, key: key) else {
            throw KeychainError(.authFailed, "the backup password is wrong, or the file was altered")
        }
        return (header, payload)
    }

    static func encodeHeader(_ h: Header) -> [UInt8] {
        var w = ByteWriter(capacity: 128)
        w.raw(magic)
        w.u16(formatVersion)
        w.u8(1)
        w.u64(h.argon2.opsLimit)
        w.u64(UInt64(h.argon2.memLimitBytes))
        w.raw(h.salt)
        w.u32(UInt32(h.itemCount))
        w.u32(UInt32(h.excludedCount))
        w.lengthPrefixed(Array(h.note.utf8))
        return w.bytes
    }

    static func readHeader(_ r: inout ByteReader) throws(KeychainError) -> Header {
        guard Array(try r.take(magic.count)) == magic else {
            throw KeychainError(.decode, "not a keychaind backup file")
        }
        let version = try r.u16()
        guard version <= formatVersion else {
            throw KeychainError(.unimplemented, "the backup is in format \(version), newer than this keychaind reads (\(formatVersion)): restore it with a newer keychaind")
        }
        guard version == formatVersion, try r.u8() == 1 else {
            throw KeychainError(.decode, "the backup header is damaged")
        }
        let ops = try r.u64()
        let mem = try r.u64()
        let params = Argon2Parameters(opsLimit: ops, memLimitBytes: Int(clamping: mem))
        guard params.isValid else { throw KeychainError(.decode, "the backup's Argon2id parameters are out of range: it is damaged") }
        let salt = Array(try r.take(Argon2Parameters.saltBytes))
        let items = Int(try r.u32())
        let excluded = Int(try r.u32())
        guard let note = String(validating: try r.lengthPrefixed(max: 4096), as: UTF8.self) else {
            throw KeychainError(.decode, "the backup header is damaged")
        }
        return Header(itemCount: items, excludedCount: excluded, note: note, argon2: params, salt: salt)
    }
}
