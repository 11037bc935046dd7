import KeychainModel

/// One call to keychaind. docs/protocol.md is the specification; this is its Swift form.
public enum Request: Sendable, Equatable {
    case add(AttributeDictionary)
    case copyMatching(AttributeDictionary)
    case update(query: AttributeDictionary, changes: AttributeDictionary)
    case delete(AttributeDictionary)
    case status
    case lock
    case unlock(passcode: SecretBytes)
    case setPasscode(new: SecretBytes)
    case changePasscode(old: SecretBytes, new: SecretBytes)
    case removePasscode(current: SecretBytes)
    /// Seals a backup of every migratable item under `password`; the result gives a session
    /// to read the file from, and its size.
    case backupBegin(password: SecretBytes)
    /// Up to `Request.chunkBytes` of the backup file from `offset`.
    case backupRead(session: UInt64, offset: UInt64)
    /// Starts receiving a backup file of `size` bytes.
    case restoreBegin(size: UInt64)
    /// The bytes of the file at `offset`.
    case restoreWrite(session: UInt64, offset: UInt64, bytes: [UInt8])
    /// Opens the received file with `password` and restores it in one transaction.
    case restoreCommit(session: UInt64, password: SecretBytes, onConflict: ConflictPolicy)
    /// `inner`, decided for another process (pid and start time, field 22 of /proc/PID/stat):
    /// the Secret Service bridge speaking for its D-Bus caller. Only a configured bridge may
    /// send it; `inner` is never itself an asCaller (docs/security.md).
    indirect case asCaller(pid: Int32, startTime: UInt64, inner: Request)
    /// Secret Service items of one collection (`svce` = "secret-service:" + collection) in the
    /// caller's groups that hold all these pairs (`exact`: exactly this set). A list of
    /// attribute dictionaries, locked items included (their attributes unread).
    case attributeSearch(collection: String, exact: Bool, pairs: SecretServiceAttributes)
    /// Adds a Secret Service item (or, with `replace`, rewrites the first one with the same
    /// attribute set); answers its persistent reference and whether it replaced one.
    case attributeAdd(AttributeDictionary, replace: Bool)
    /// The portal's per-app secret (64 random bytes, made on first use), kept in the group
    /// `portal.<appID>`. Only for the portal, inside asCaller.
    case portalSecret(appID: String)
    /// The secrets of these Secret Service items (persistent references), each answered with
    /// its svce and content type: GetSecrets in one call. Items the caller cannot read now
    /// (not in its groups, deleted, of a locked class, not Secret Service items) are left out.
    case attributeSecrets(refs: [[UInt8]])
    /// Turns the connection into a feed of change notices: after the one answer, keychaind
    /// sends a frame whenever a Secret Service item the caller may know of, or the lock state,
    /// changes (docs/protocol.md, op 47). The connection takes no further request.
    case changeSubscribe
    /// Generates a private key of the `type` the attributes name and stores it as a keys item;
    /// the answer is its attributes with its persistent reference (docs/keys.md).
    case keyGenerate(AttributeDictionary)
    /// The public key of the private key the query finds.
    case keyPublic(AttributeDictionary)
    /// A signature by the key the query finds: parameters `algorithm` and `data`.
    case keySign(query: AttributeDictionary, parameters: AttributeDictionary)
    /// Checks a signature against the key's public key: `algorithm`, `data`, `signature`.
    case keyVerify(query: AttributeDictionary, parameters: AttributeDictionary)
    /// Key agreement with a peer's public key: `algorithm`, `peer`, and for the KDF
    /// algorithms `requestedSize` and optionally `sharedInfo`.
    case keyAgree(query: AttributeDictionary, parameters: AttributeDictionary)
    /// Encryption to the key's public half: `algorithm`, `data` (the plaintext), optionally
    /// `publicKey` (then the key's class key is not needed).
    case keyEncrypt(query: AttributeDictionary, parameters: AttributeDictionary)
    /// Decryption with the private key: `algorithm`, `data` (the ciphertext).
    case keyDecrypt(query: AttributeDictionary, parameters: AttributeDictionary)
    /// This device's sync state (docs/sync.md, 7.4): fingerprints, epoch, counts; never a key.
    case syncStatus
    /// Founds a circle in the configured database; `name` is this device's, for people.
    case syncCreate(name: String)
    /// Asks to join the circle whose fingerprint is `circle` (32 digits, spaces allowed).
    case syncJoin(circle: String, name: String)
    /// Approves the waiting device whose fingerprint is `device`.
    case syncApprove(device: String)
    /// The circle's members and the devices waiting to join.
    case syncDevices
    /// Runs a sync pass now and answers when it has finished (caught up) or failed.
    case syncNow
    /// Removes the member whose fingerprint is `device` and rotates the circle key.
    case syncRemove(device: String)
    /// Leaves the circle; a remaining member rotates the key.
    case syncLeave
    /// Wraps the passcode classes' keys under the login password in the login slot (replacing
    /// one there): the keychain must be unlocked and have a passcode (issue 26).
    case loginSlotAdd(password: SecretBytes)
    /// Drops the login slot.
    case loginSlotRemove
    /// `login_slot` (none, current, stale), `failed_attempts`, `retry_after` of the slot.
    case loginSlotStatus
    /// Unlocks through the login slot; a failure counts on the slot's own counter.
    case loginUnlock(password: SecretBytes)
    /// Follows a change of the login password. An empty `old` (a reset by root, which knows
    /// no old password) marks the slot stale; so does an `old` that does not open it.
    case loginSlotRewrap(old: SecretBytes, new: SecretBytes)
    /// The daemon's metrics in Prometheus's text exposition (admin; issue 27).
    case metrics
    /// Admin: the item a LoadCredential= unit and credential id map to ("unit", "id", and "uid"
    /// for a user unit), as its attributes without the secret (issue 27).
    case credentialLookup(AttributeDictionary)
    /// A new authentication context (LAContext) of this connection and its process; the
    /// answer is its reference, `u_CredRef` in later queries (issue 29).
    case contextCreate
    /// Asks the person now for the context `reference`, showing `reason`.
    case contextAuthenticate(reference: [UInt8], reason: String)
    /// Ends the context `reference`.
    case contextInvalidate(reference: [UInt8])
    /// Unlocks through keychaind's own passcode prompt (the PKCS#11 protected authentication
    /// path, issue 30): the person types the passcode into keychaind's pinentry, so it never
    /// passes through the caller. Made on the caller's own connection, never inside asCaller.
    case unlockPrompt
    /// Gives the context `reference` the application password (LAContext.setCredential with
    /// .applicationPassword); an empty one takes it away.
    case contextSetCredential(reference: [UInt8], credential: SecretBytes)

    /// The longest fingerprint text accepted (32 digits with spaces between groups, and some slack).
    public static let maxFingerprintTextBytes = 128
    /// A device name: at most 64 bytes of UTF-8 (docs/sync.md, section 3).
    public static let maxDeviceNameBytes = 64

    /// The longest context reference accepted (keychaind makes 32 bytes).
    public static let maxContextReferenceBytes = 64
    /// The longest reason a contextAuthenticate may show (it is cut shorter in the prompt).
    public static let maxReasonBytes = 1024
    /// The longest application password a context takes.
    public static let maxCredentialBytes = 1024

    /// Most items in one attributeSecrets (the bridge's GetSecrets takes as many).
    public static let maxSecretsPerCall: UInt32 = 4096

    /// The largest piece of a backup file moved in one call.
    public static let chunkBytes = 512 << 10

    /// Operation codes on the wire.
    public enum Operation: UInt8, Sendable, CaseIterable {
        case add = 1, copyMatching = 2, update = 3, delete = 4, status = 5
        case lock = 6, unlock = 7, setPasscode = 8, changePasscode = 9, removePasscode = 10
        case backupBegin = 11, backupRead = 12, restoreBegin = 13, restoreWrite = 14, restoreCommit = 15
        // 16-19: the Secret Service (issue 16). 24-31: keys (29-30 encryption, 31 reserved).
        case asCaller = 16, attributeSearch = 17, attributeAdd = 18, portalSecret = 19
        case keyGenerate = 24, keyPublic = 25, keySign = 26, keyVerify = 27, keyAgree = 28
        case keyEncrypt = 29, keyDecrypt = 30
        // 32-39: sync (issue 18).
        case syncStatus = 32, syncCreate = 33, syncJoin = 34, syncApprove = 35, syncDevices = 37, syncNow = 39
        case syncRemove = 36, syncLeave = 38
        // 40-44: the login slot (issue 26).
        case loginSlotAdd = 40, loginSlotRemove = 41, loginSlotStatus = 42, loginUnlock = 43, loginSlotRewrap = 44
        case metrics = 45
        case credentialLookup = 46
        // 47-48: the Secret Service bridge (issue 28).
        case changeSubscribe = 47, attributeSecrets = 48
        // 49-52: authentication contexts (issue 29).
        case contextCreate = 49, contextAuthenticate = 50, contextSetCredential = 51, contextInvalidate = 52
        case unlockPrompt = 53
    }

    public var operation: Operation {
        switch self {
        case .add: .add
        case .copyMatching: .copyMatching
        case .update: .update
        case .delete: .delete
        case .status: .status
        case .lock: .lock
        case .unlock: .unlock
        case .setPasscode: .setPasscode
        case .changePasscode: .changePasscode
        case .removePasscode: .removePasscode
        case .backupBegin: .backupBegin
        case .backupRead: .backupRead
        case .restoreBegin: .restoreBegin
        case .restoreWrite: .restoreWrite
        case .restoreCommit: .restoreCommit
        case .asCaller: .asCaller
        case .attributeSearch: .attributeSearch
        case .attributeAdd: .attributeAdd
        case .portalSecret: .portalSecret
        case .attributeSecrets: .attributeSecrets
        case .changeSubscribe: .changeSubscribe
        case .keyGenerate: .keyGenerate
        case .keyPublic: .keyPublic
        case .keySign: .keySign
        case .keyVerify: .keyVerify
        case .keyAgree: .keyAgree
        case .keyEncrypt: .keyEncrypt
        case .keyDecrypt: .keyDecrypt
        case .syncStatus: .syncStatus
        case .syncCreate: .syncCreate
        case .syncJoin: .syncJoin
        case .syncApprove: .syncApprove
        case .syncDevices: .syncDevices
        case .syncNow: .syncNow
        case .syncRemove: .syncRemove
        case .syncLeave: .syncLeave
        case .loginSlotAdd: .loginSlotAdd
        case .loginSlotRemove: .loginSlotRemove
        case .loginSlotStatus: .loginSlotStatus
        case .loginUnlock: .loginUnlock
        case .loginSlotRewrap: .loginSlotRewrap
        case .metrics: .metrics
        case .credentialLookup: .credentialLookup
        case .contextCreate: .contextCreate
        case .contextAuthenticate: .contextAuthenticate
        case .contextInvalidate: .contextInvalidate
        case .unlockPrompt: .unlockPrompt
        case .contextSetCredential: .contextSetCredential
        }
    }

    /// Calls that change the lock state or the passcode: admin callers only.
    public var isAdministrative: Bool {
        switch self {
        case .lock, .unlock, .setPasscode, .changePasscode, .removePasscode,
             .backupBegin, .backupRead, .restoreBegin, .restoreWrite, .restoreCommit: true
        case .syncCreate, .syncJoin, .syncApprove: true
        case .syncRemove, .syncLeave: true
        // As unlock: by default the keychain's own uid and root (docs/security.md, "The login slot").
        case .loginSlotAdd, .loginSlotRemove, .loginSlotStatus, .loginUnlock, .loginSlotRewrap: true
        // Lock state and the timing of every call: not for any local user (docs/security.md, "Metrics").
        case .metrics: true
        case .credentialLookup: true
        // Not admin: the person types the passcode, not the caller; an app of the policy may ask
        // (docs/security.md, "Unlock through keychaind's prompt").
        case .unlockPrompt: false
        case .asCaller(_, _, let inner): inner.isAdministrative
        default: false
        }
    }

    /// Calls on items: a caller with no access groups can make none of them. (The portal's
    /// secret lives in a group of the app it is for, not of its caller.)
    public var needsAccessGroups: Bool {
        switch self {
        case .add, .copyMatching, .update, .delete, .attributeSearch, .attributeAdd, .attributeSecrets: true
        case .keyGenerate, .keyPublic, .keySign, .keyVerify, .keyAgree: true
        case .asCaller(_, _, let inner): inner.needsAccessGroups
        case .keyEncrypt, .keyDecrypt: true
        default: false
        }
    }

    /// The sync calls: they talk to PostgreSQL, so they never run under the store's lock.
    public var isSync: Bool {
        switch self {
        case .syncStatus, .syncCreate, .syncJoin, .syncApprove, .syncDevices, .syncNow: true
        case .syncRemove, .syncLeave: true
        default: false
        }
    }

    /// Calls that write items, and so may share a group commit with others.
    public var writesItems: Bool {
        switch self {
        case .add, .update, .delete, .attributeAdd, .portalSecret, .keyGenerate: true
        case .asCaller(_, _, let inner): inner.writesItems
        default: false
        }
    }
}

/// The answer to one request: an OSStatus-style code, a message that never holds secret bytes
/// (empty on success), and a result (`.none` when the call has none).
public struct Response: Sendable, Equatable {
    public var status: Int32
    public var message: String
    public var result: QueryResult
    /// A page of a list answer that goes on in the next frame (result kind 3): the client
    /// reads frames, adding their items, until one that does not go on.
    public var continues: Bool

    public init(status: Int32 = 0, message: String = "", result: QueryResult = .none, continues: Bool = false) {
        self.status = status
        self.message = message
        self.result = result
        self.continues = continues
    }

    public init(error: KeychainError) {
        self.init(status: error.status.rawValue, message: error.message)
    }

    /// The error this response carries, if any.
    public var error: KeychainError? {
        guard status != 0 else { return nil }
        return KeychainError(KeychainStatus(rawValue: status) ?? .internal,
                             message.isEmpty ? "keychaind returned status \(status)" : message)
    }
}

/// Encoding and decoding of payloads (the bytes inside a frame). docs/protocol.md, section 3.
public enum WireCodec {
    public static let version: UInt8 = 1

    // MARK: requests

    /// The payload of `request`, in wiped memory.
    public static func encode(_ request: Request) -> SecretBytes {
        var w = ByteWriter(capacity: 128)
        encode(request, into: &w)
        return w.finish()
    }

    /// `request` as a whole frame (length header and payload) written once, in wiped memory:
    /// what a client sends.
    public static func frame(_ request: Request) -> SecretBytes {
        framed(capacity: 132) { encode(request, into: &$0) }
    }

    /// A frame whose payload `body` writes, its length filled in afterwards: one buffer, no copy.
    private static func framed(capacity: Int, _ body: (inout ByteWriter) -> Void) -> SecretBytes {
        var w = ByteWriter(capacity: capacity)
        w.u32(0)
        body(&w)
        w.patchU32(UInt32(w.count - 4), at: 0)
        return w.finish()
    }

    private static func encode(_ request: Request, into w: inout ByteWriter) {
        w.u8(version)
        w.u8(request.operation.rawValue)
        switch request {
        case .add(let d), .copyMatching(let d), .delete(let d), .keyGenerate(let d), .keyPublic(let d), .credentialLookup(let d):
            AttributeCodec.encode(d, into: &w)
        case .update(let q, let c), .keySign(let q, let c), .keyVerify(let q, let c), .keyAgree(let q, let c),
             .keyEncrypt(let q, let c), .keyDecrypt(let q, let c):
            AttributeCodec.encode(q, into: &w)
            AttributeCodec.encode(c, into: &w)
        case .status, .lock, .syncStatus, .syncDevices, .syncNow, .syncLeave, .loginSlotRemove, .loginSlotStatus, .metrics, .changeSubscribe,
             .contextCreate, .unlockPrompt:
            break
        case .contextAuthenticate(let reference, let reason):
            w.lengthPrefixed(reference)
            w.lengthPrefixed(reason.utf8)
        case .contextInvalidate(let reference):
            w.lengthPrefixed(reference)
        case .contextSetCredential(let reference, let credential):
            w.lengthPrefixed(reference)
            w.lengthPrefixed(credential)
        case .loginSlotAdd(let p), .loginUnlock(let p):
            w.lengthPrefixed(p)
        case .loginSlotRewrap(let old, let new):
            w.lengthPrefixed(old)
            w.lengthPrefixed(new)
        case .syncCreate(let name):
            w.lengthPrefixed(name.utf8)
        case .syncJoin(let circle, let name):
            w.lengthPrefixed(circle.utf8)
            w.lengthPrefixed(name.utf8)
        case .syncApprove(let device), .syncRemove(let device):
            w.lengthPrefixed(device.utf8)
        case .unlock(let p), .setPasscode(let p), .removePasscode(let p):
            w.lengthPrefixed(p)
        case .changePasscode(let old, let new):
            w.lengthPrefixed(old)
            w.lengthPrefixed(new)
        case .backupBegin(let p):
            w.lengthPrefixed(p)
        case .backupRead(let session, let offset):
            w.u64(session)
            w.u64(offset)
        case .restoreBegin(let size):
            w.u64(size)
        case .restoreWrite(let session, let offset, let bytes):
            w.u64(session)
            w.u64(offset)
            w.lengthPrefixed(bytes)
        case .restoreCommit(let session, let password, let onConflict):
            w.u64(session)
            w.lengthPrefixed(password)
            w.lengthPrefixed(Array(onConflict.rawValue.utf8))
        case .asCaller(let pid, let startTime, let inner):
            w.u32(UInt32(bitPattern: pid))
            w.u64(startTime)
            encode(inner, into: &w)
        case .attributeSearch(let collection, let exact, let pairs):
            w.lengthPrefixed(collection.utf8)
            w.u8(exact ? 1 : 0)
            w.raw(pairs.encoded)
        case .attributeAdd(let d, let replace):
            AttributeCodec.encode(d, into: &w)
            w.u8(replace ? 1 : 0)
        case .portalSecret(let appID):
            w.lengthPrefixed(appID.utf8)
        case .attributeSecrets(let refs):
            w.u32(UInt32(refs.count))
            for ref in refs { w.lengthPrefixed(ref) }
        }
    }

    /// Decodes a request payload. errSecParam for anything malformed; errSecUnimplemented for
    /// an operation this daemon does not know (the connection stays usable).
    public static func decodeRequest(_ payload: SecretBytes) throws(KeychainError) -> Request {
        var r = ByteReader(payload, failure: .param)
        let request = try decodeRequest(from: &r, nested: false)
        guard r.isAtEnd else { throw KeychainError(.param, "\(r.remaining) unexpected bytes after the request") }
        return request
    }

    /// One request payload from `r`; `nested`: inside an asCaller, where another is errSecParam.
    private static func decodeRequest(from r: inout ByteReader, nested: Bool) throws(KeychainError) -> Request {
        let v = try r.u8()
        guard v == version else { throw KeychainError(.param, "protocol version \(v) is not supported (this keychaind speaks \(version))") }
        let code = try r.u8()
        guard let op = Request.Operation(rawValue: code) else {
            throw KeychainError(.unimplemented, "unknown operation \(code)")
        }
        let request: Request
        switch op {
        case .add: request = .add(try AttributeCodec.decode(from: &r))
        case .copyMatching: request = .copyMatching(try AttributeCodec.decode(from: &r))
        case .delete: request = .delete(try AttributeCodec.decode(from: &r))
        case .update:
            let q = try AttributeCodec.decode(from: &r)
            request = .update(query: q, changes: try AttributeCodec.decode(from: &r))
        case .keyGenerate: request = .keyGenerate(try AttributeCodec.decode(from: &r))
        case .keyPublic: request = .keyPublic(try AttributeCodec.decode(from: &r))
        case .keySign:
            let q = try AttributeCodec.decode(from: &r)
            request = .keySign(query: q, parameters: try AttributeCodec.decode(from: &r))
        case .keyVerify:
            let q = try AttributeCodec.decode(from: &r)
            request = .keyVerify(query: q, parameters: try AttributeCodec.decode(from: &r))
        case .keyAgree:
            let q = try AttributeCodec.decode(from: &r)
            request = .keyAgree(query: q, parameters: try AttributeCodec.decode(from: &r))
        case .keyEncrypt:
            let q = try AttributeCodec.decode(from: &r)
            request = .keyEncrypt(query: q, parameters: try AttributeCodec.decode(from: &r))
        case .keyDecrypt:
            let q = try AttributeCodec.decode(from: &r)
            request = .keyDecrypt(query: q, parameters: try AttributeCodec.decode(from: &r))
        case .status: request = .status
        case .lock: request = .lock
        case .unlock: request = .unlock(passcode: try passcode(&r))
        case .setPasscode: request = .setPasscode(new: try passcode(&r))
        case .removePasscode: request = .removePasscode(current: try passcode(&r))
        case .changePasscode:
            let old = try passcode(&r)
            request = .changePasscode(old: old, new: try passcode(&r))
        case .backupBegin: request = .backupBegin(password: try passcode(&r))
        case .backupRead: request = .backupRead(session: try r.u64(), offset: try r.u64())
        case .restoreBegin: request = .restoreBegin(size: try r.u64())
        case .restoreWrite:
            let session = try r.u64()
            let offset = try r.u64()
            // A piece of a backup file: ciphertext.
            request = .restoreWrite(session: session, offset: offset, bytes: try r.lengthPrefixedArray(max: Request.chunkBytes))
        case .restoreCommit:
            let session = try r.u64()
            let password = try passcode(&r)
            guard let text = StrictUTF8.string(try r.lengthPrefixedArray(max: 16)),
                  let policy = ConflictPolicy(rawValue: text) else {
                throw KeychainError(.param, "on-conflict must be skip, replace or fail")
            }
            request = .restoreCommit(session: session, password: password, onConflict: policy)
        case .asCaller:
            guard !nested else { throw KeychainError(.param, "an asCaller request cannot carry another asCaller") }
            let pid = Int32(bitPattern: try r.u32())
            guard pid > 0 else { throw KeychainError(.param, "asCaller names pid \(pid)") }
            let startTime = try r.u64()
            request = .asCaller(pid: pid, startTime: startTime, inner: try decodeRequest(from: &r, nested: true))
        case .attributeSearch:
            guard let collection = StrictUTF8.string(try r.lengthPrefixedArray(max: 64)),
                  SecretServiceNames.isValidCollection(collection) else {
                throw KeychainError(.param, "a collection name is 1 to 64 bytes of a-z, 0-9 and _")
            }
            let mode = try r.u8()
            guard mode <= 1 else { throw KeychainError(.param, "attribute search mode \(mode) is neither 0 (has these pairs) nor 1 (exactly this set)") }
            request = .attributeSearch(collection: collection, exact: mode == 1, pairs: try SecretServiceAttributes(from: &r))
        case .attributeAdd:
            let d = try AttributeCodec.decode(from: &r)
            let replace = try r.u8()
            guard replace <= 1 else { throw KeychainError(.param, "replace must be 0 or 1") }
            request = .attributeAdd(d, replace: replace == 1)
        case .portalSecret:
            guard let appID = StrictUTF8.string(try r.lengthPrefixedArray(max: 255)),
                  SecretServiceNames.isValidAppID(appID) else {
                throw KeychainError(.param, "an app id is 1 to 255 bytes of A-Z, a-z, 0-9, ., _ and -")
            }
            request = .portalSecret(appID: appID)
        case .attributeSecrets:
            let count = try r.u32()
            guard count >= 1 && count <= Request.maxSecretsPerCall else {
                throw KeychainError(.param, "attributeSecrets takes 1 to \(Request.maxSecretsPerCall) persistent references, not \(count)")
            }
            var refs: [[UInt8]] = []
            for _ in 0..<count {
                let ref = try r.lengthPrefixedArray(max: 20)
                guard ref.count == 20 else { throw KeychainError(.param, "a persistent reference is 20 bytes") }
                refs.append(ref)
            }
            request = .attributeSecrets(refs: refs)
        case .changeSubscribe:
            guard !nested else { throw KeychainError(.param, "changeSubscribe is made on the subscriber's own connection, not inside an asCaller") }
            request = .changeSubscribe
        case .syncStatus: request = .syncStatus
        case .syncDevices: request = .syncDevices
        case .syncNow: request = .syncNow
        case .syncCreate: request = .syncCreate(name: try deviceName(&r))
        case .syncJoin:
            let circle = try fingerprintText(&r)
            request = .syncJoin(circle: circle, name: try deviceName(&r))
        case .syncApprove: request = .syncApprove(device: try fingerprintText(&r))
        case .syncRemove: request = .syncRemove(device: try fingerprintText(&r))
        case .syncLeave: request = .syncLeave
        case .loginSlotAdd: request = .loginSlotAdd(password: try passcode(&r))
        case .loginSlotRemove: request = .loginSlotRemove
        case .loginSlotStatus: request = .loginSlotStatus
        case .metrics: request = .metrics
        case .loginUnlock: request = .loginUnlock(password: try passcode(&r))
        case .loginSlotRewrap:
            let old = try passcode(&r)
            request = .loginSlotRewrap(old: old, new: try passcode(&r))
        case .credentialLookup: request = .credentialLookup(try AttributeCodec.decode(from: &r))
        case .contextCreate, .contextAuthenticate, .contextInvalidate, .contextSetCredential:
            // A context belongs to the connection and process that made it: the bridge cannot
            // hold one for a process it speaks for.
            guard !nested else { throw KeychainError(.param, "authentication contexts are made on the caller's own connection, not inside an asCaller") }
            switch op {
            case .contextCreate: request = .contextCreate
            case .contextAuthenticate:
                let reference = try contextReference(&r)
                guard let reason = StrictUTF8.string(try r.lengthPrefixedArray(max: Request.maxReasonBytes)) else {
                    throw KeychainError(.param, "a reason is at most \(Request.maxReasonBytes) bytes of UTF-8")
                }
                request = .contextAuthenticate(reference: reference, reason: reason)
            case .contextSetCredential:
                let reference = try contextReference(&r)
                request = .contextSetCredential(reference: reference, credential: try r.lengthPrefixed(max: Request.maxCredentialBytes))
            default: request = .contextInvalidate(reference: try contextReference(&r))
            }
        case .unlockPrompt:
            // The prompt names the process on the other end of the connection: through the
            // bridge that would be the bridge, not the app the person is asked about.
            guard !nested else { throw KeychainError(.param, "unlockPrompt is made on the caller's own connection, not inside an asCaller") }
            request = .unlockPrompt
        }
        return request
    }

    private static func contextReference(_ r: inout ByteReader) throws(KeychainError) -> [UInt8] {
        let reference = try r.lengthPrefixedArray(max: Request.maxContextReferenceBytes)
        guard !reference.isEmpty else { throw KeychainError(.param, "an authentication context's reference is 1 to \(Request.maxContextReferenceBytes) bytes") }
        return reference
    }

    private static func deviceName(_ r: inout ByteReader) throws(KeychainError) -> String {
        guard let name = StrictUTF8.string(try r.lengthPrefixedArray(max: Request.maxDeviceNameBytes)) else {
            throw KeychainError(.param, "a device name is at most \(Request.maxDeviceNameBytes) bytes of UTF-8")
        }
        return name
    }

    private static func fingerprintText(_ r: inout ByteReader) throws(KeychainError) -> String {
        guard let text = StrictUTF8.string(try r.lengthPrefixedArray(max: Request.maxFingerprintTextBytes)) else {
            throw KeychainError(.param, "a fingerprint is 32 digits")
        }
        return text
    }

    private static func passcode(_ r: inout ByteReader) throws(KeychainError) -> SecretBytes {
        try r.lengthPrefixed(max: 4096)
    }

    // MARK: responses

    /// The payload of `response`, in wiped memory.
    public static func encode(_ response: Response) -> SecretBytes {
        var w = ByteWriter(capacity: 64)
        encode(response, into: &w)
        return w.finish()
    }

    /// `response` as a whole frame written once, in wiped memory: what the daemon sends.
    public static func frame(_ response: Response) -> SecretBytes {
        framed(capacity: 68) { encode(response, into: &$0) }
    }

    private static func encode(_ response: Response, into w: inout ByteWriter) {
        w.u8(version)
        w.u32(UInt32(bitPattern: response.status))
        w.lengthPrefixed(response.message.utf8)
        switch response.result {
        case .none: w.u8(0)
        case .single(let item): w.u8(1); encode(item, into: &w)
        case .list(let items):
            w.u8(response.continues ? 3 : 2)
            w.u32(UInt32(items.count))
            for item in items { encode(item, into: &w) }
        }
    }

    /// The bytes `item` takes in a response: pages are cut by it.
    public static func encodedSize(_ item: ItemResult) -> Int {
        switch item {
        case .data(let d): 1 + 4 + d.count
        case .persistentRef(let d): 1 + 4 + d.count
        case .attributes(let dict): 1 + 4 + dict.reduce(0) { $0 + 2 + $1.key.utf8.count + encodedSize($1.value) }
        }
    }

    static func encodedSize(_ value: AttributeValue) -> Int {
        switch value {
        case .string(let s): 1 + 4 + s.utf8.count
        case .data(let d): 1 + 4 + d.count
        case .int, .date: 1 + 8
        case .bool: 1 + 1
        }
    }

    private static func encode(_ item: ItemResult, into w: inout ByteWriter) {
        switch item {
        case .data(let d): w.u8(1); w.lengthPrefixed(d)
        case .persistentRef(let d): w.u8(2); w.lengthPrefixed(d)
        case .attributes(let dict): w.u8(3); AttributeCodec.encode(dict, into: &w)
        }
    }

    public static func decodeResponse(_ payload: SecretBytes) throws(KeychainError) -> Response {
        var r = ByteReader(payload, failure: .decode)
        let v = try r.u8()
        guard v == version else { throw KeychainError(.decode, "keychaind answered in protocol version \(v); this client speaks \(version)") }
        let status = Int32(bitPattern: try r.u32())
        guard let message = StrictUTF8.string(try r.lengthPrefixedArray(max: 64 << 10)) else {
            throw KeychainError(.decode, "response message is not UTF-8")
        }
        let result: QueryResult
        var continues = false
        switch try r.u8() {
        case 0: result = .none
        case 1: result = .single(try item(&r))
        case let kind where kind == 2 || kind == 3:
            let count = Int(try r.u32())
            guard count <= r.remaining else { throw KeychainError(.decode, "response claims \(count) items") }
            var items: [ItemResult] = []
            items.reserveCapacity(count)
            for _ in 0..<count { items.append(try item(&r)) }
            result = .list(items)
            continues = kind == 3
        case let k: throw KeychainError(.decode, "unknown result kind \(k)")
        }
        guard r.isAtEnd else { throw KeychainError(.decode, "trailing bytes after the response") }
        return Response(status: status, message: message, result: result, continues: continues)
    }

    private static func item(_ r: inout ByteReader) throws(KeychainError) -> ItemResult {
        switch try r.u8() {
        case 1: return .data(try r.lengthPrefixed(max: KeychainLimits.maxSecretBytes))
        case 2: return .persistentRef(try r.lengthPrefixedArray(max: 64))
        case 3: return .attributes(try AttributeCodec.decode(from: &r))
        case let k: throw KeychainError(.decode, "unknown item result kind \(k)")
        }
    }
}
