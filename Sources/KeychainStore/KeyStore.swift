import KeychainCrypto
import KeychainModel
import KeychainStorage

/// Keys that live in the daemon (docs/keys.md): generated or imported as `keys` items (see
/// `KeyItem`), and used through the key calls (sign, verify, agree, encrypt, decrypt) without
/// their bytes ever leaving the daemon when they are not extractable.
public struct KeyStore {
    let store: ItemStore

    /// Generates a private key of the `type` the attributes name and stores it like an import.
    /// Returns the stored item's attributes with its v_PersistentRef.
    public func generateKey(_ dict: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> QueryResult {
        try store.items.add(try Self.generatedItem(dict), scope: scope)
    }

    /// The add dictionary of a key generation: the caller's attributes checked, with a new
    /// private key of the `type` they name. Made outside the store's lock for a key sealed
    /// under an application password, whose sealing runs Argon2id (StoreExecutor).
    public static func generatedItem(_ dict: AttributeDictionary) throws(KeychainError) -> AttributeDictionary {
        for key in dict.keys where key == "v_Data" || key.hasPrefix("r_") || key == "v_PersistentRef" {
            throw KeychainError(.param, "\(key) has no place in a key generation: the daemon makes the key and answers with its attributes")
        }
        var item = dict
        item["class"] = .string(ItemClass.key.rawValue)
        if let given = item["kcls"], given != .int(KeyItem.privateKeyClass), given != .string("1") {
            throw KeychainError(.param, "a generated key is a private key (kcls 1)")
        }
        item["kcls"] = .int(KeyItem.privateKeyClass)
        let type = try KeyItem.keyType(named: item["type"])
        let key = PrivateKey.generate(type)
        item["v_Data"] = .data(key.bytes)
        item["r_Attributes"] = .bool(true)
        item["r_PersistentRef"] = .bool(true)
        return item
    }

    // MARK: the key calls

    /// The private key the query names (the first match, as CopyMatching's default limit),
    /// within the caller's groups, with `usage` (sign, drve, decr) on. errSecItemNotFound when
    /// none matches; errSecInteractionNotAllowed while its class key is locked; errSecParam
    /// when the flag is off or the item is not a key keychaind can use.
    /// A key sealed under an application password is errSecInteractionNotAllowed here: its
    /// bytes open only outside the store's lock (the key calls).
    public func privateKey(_ dict: AttributeDictionary, usage: String?, scope: AccessScope) throws(KeychainError) -> PrivateKey {
        guard case .row(let row) = try foundKey(dict, usage: usage, scope: scope, .publicKey).found else {
            throw KeychainError(.internal, "a key call without its key")
        }
        guard let key = try row.opened().key.key else { throw SecItems.noApplicationPassword }
        return key
    }

    /// The part of a key call that needs the store (its lock, in the daemon): the query and
    /// the caller's groups checked, and the key's row read with its class key, still sealed. A
    /// persistent reference, how every client names a key, is one indexed row read
    /// (`fetchRow`); any other query selects its candidate rows by their columns, as a read
    /// does. Opening and checking the key is left to `FoundKeyCall.opened`, after the lock.
    func foundKey(_ dict: AttributeDictionary, usage: String?, scope: AccessScope, _ use: PreparedKeyCall.Use) throws(KeychainError) -> FoundKeyCall {
        var query = dict
        query["class"] = .string(ItemClass.key.rawValue)
        // A persistent reference names one item and may not be joined by attributes.
        if query["v_PersistentRef"] == nil { query["kcls"] = .int(KeyItem.privateKeyClass) }
        let parsed = try ItemQuery(query, for: .copyMatching)
        if parsed.authenticationUI == .skip {
            throw KeychainError(.param, "u_AuthUI Skip is for copyMatching only; a key call may Allow or Fail")
        }
        let groups = try scope.groups(naming: parsed.accessGroup)
        let plan = store.items.plan(.key, attributes: parsed.attributes, groups: groups, query: parsed)
        let fetched: FetchedRows
        if let ref = parsed.persistentRef {
            fetched = try store.rows.named(ref, groups: groups)
        } else {
            // Stops at the first match, opening rows as it goes: copying every candidate row out
            // of the lock would cost a caller with many keys all of them on each call. The one
            // row found is opened again after the lock, as a row named by reference is.
            let (items, corrupt) = try store.items.find(plan, limit: 1, withAttributes: true)
            guard let item = items.first, let pdmn = item.row.protection else { throw SecItems.nothingFound(corrupt: corrupt) }
            fetched = FetchedRows(rows: [(item.row, try store.classKey(pdmn))], corrupt: corrupt, lastRowID: item.row.rowid,
                                  exhausted: true, readAt: store.now())
        }
        // Refused here when no row is the caller's: nothing leaves the lock for it.
        guard !fetched.rows.isEmpty else { throw SecItems.nothingFound(corrupt: fetched.corrupt) }
        let row = KeyRow(fetched: fetched, plan: plan, reader: store.splitReader, usage: usage,
                         prompt: parsed.operationPrompt, mayAsk: parsed.authenticationUI == .allow)
        return FoundKeyCall(.row(row), use: use)
    }

    public func publicKey(_ query: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> [UInt8] {
        try Array(publicKeyExport(query, scope: scope).opened().data())
    }

    /// The key whose public half is asked for, opened: for the 25519 keys the public key is a
    /// scalar multiplication, left to `run` outside the store's lock.
    public func publicKeyExport(_ query: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> FoundKeyCall {
        try foundKey(query, usage: nil, scope: scope, .publicKey)
    }

    /// Needs the key's sign flag.
    public func sign(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> [UInt8] {
        try Array(signature(query, parameters: parameters, scope: scope).opened().data())
    }

    /// The key's row and the checked parameters of a signature, without making it: the daemon
    /// reads the row under the store's lock and opens the key and signs outside it, so
    /// concurrent signers use every core. Needs the key's sign flag.
    public func signature(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> FoundKeyCall {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.signingAlgorithm()
        let data = try call.bytes("data")
        return try foundKey(query, usage: "sign", scope: scope, .sign(data, algorithm))
    }

    /// Needs no flag: verification uses only the public key, which anyone may have.
    public func verify(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> Bool {
        try verification(query, parameters: parameters, scope: scope).opened().run() == .attributes(["valid": .bool(true)])
    }

    /// A verification's key and parameters; the verification itself (for P-256 the costlier
    /// half of ECDSA) is left to `run`.
    public func verification(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> FoundKeyCall {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.signingAlgorithm()
        let data = try call.bytes("data")
        let signature = try call.bytes("signature")
        return try foundKey(query, usage: nil, scope: scope, .verify(signature, data, algorithm))
    }

    /// Needs the key's drve flag.
    public func agree(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> SecretBytes {
        try agreement(query, parameters: parameters, scope: scope).opened().data()
    }

    /// A key agreement's key and parameters. Its KDF may hash up to a frame's worth of shared
    /// info 2,048 times (seconds), which must not hold the store's lock.
    public func agreement(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> FoundKeyCall {
        let call = KeyCallParameters(parameters)
        guard case .string(let name)? = parameters["algorithm"], let algorithm = KeyAgreementAlgorithm(rawValue: name) else {
            throw KeychainError(.param, "algorithm must be one of \(KeyAgreementAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        let peer = try call.bytes("peer")
        var size: Int?
        if let value = parameters["requestedSize"] {
            guard case .int(let n) = value, n > 0, n <= 1 << 16 else { throw KeychainError(.param, "requestedSize must be a number of bytes from 1 to 65536") }
            size = Int(n)
        }
        let sharedInfo = parameters["sharedInfo"] == nil ? [] : try call.bytes("sharedInfo")
        return try foundKey(query, usage: "drve", scope: scope, .agree(peer, algorithm, requestedSize: size, sharedInfo: sharedInfo))
    }

    // MARK: encryption (docs/keys.md, Encryption; docs/protocol.md, ops 29 and 30)

    /// Encrypts `data` to the public half of the key the query finds. Needs no usage flag (Apple
    /// puts kSecAttrCanEncrypt on the public key, which anyone holding it may use). With a
    /// `publicKey` parameter the class key is not needed either: the key must only be visible
    /// to the caller, which its row's columns tell (klbl is the public key's SHA-1), so a
    /// when-unlocked key can still be encrypted to while the keychain is locked.
    public func encrypt(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> [UInt8] {
        try Array(encryption(query, parameters: parameters, scope: scope).opened().data())
    }

    /// An encryption's public key (the caller's, checked visible, or the opened key's) and
    /// plaintext, still in wiped memory.
    public func encryption(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> FoundKeyCall {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.encryptionAlgorithm()
        let plaintext = try call.secret("data")
        if parameters["publicKey"] != nil {
            let publicKey = try call.bytes("publicKey")
            guard publicKey.count == algorithm.keyType.publicKeyBytes else {
                throw KeychainError(.param, "\(algorithm.rawValue) needs a \(algorithm.keyType.rawValue) public key of \(algorithm.keyType.publicKeyBytes) bytes, not \(publicKey.count)")
            }
            try requireVisibleKey(query, publicKey: publicKey, type: algorithm.keyType, scope: scope)
            return FoundKeyCall(.ready(PreparedKeyCall(key: nil, use: .encrypt(plaintext, to: publicKey, algorithm.keyType, algorithm))))
        }
        return try foundKey(query, usage: nil, scope: scope, .encrypt(plaintext, to: nil, algorithm.keyType, algorithm))
    }

    /// Decrypts with the private key the query finds: needs its decr flag and its class key.
    /// Every failed decryption (wrong key, altered or truncated ciphertext) is errSecParam.
    public func decrypt(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> SecretBytes {
        try decryption(query, parameters: parameters, scope: scope).opened().data()
    }

    /// A decryption's key and ciphertext: the largest a frame allows is decrypted outside the lock.
    public func decryption(_ query: AttributeDictionary, parameters: AttributeDictionary, scope: AccessScope) throws(KeychainError) -> FoundKeyCall {
        let call = KeyCallParameters(parameters)
        let algorithm = try call.encryptionAlgorithm()
        let ciphertext = try call.bytes("data")
        return try foundKey(query, usage: "decr", scope: scope, .decrypt(ciphertext, algorithm))
    }

    /// errSecItemNotFound unless the query finds, in the caller's groups, a private key of
    /// `type` whose public key is `publicKey`. Only the rows' column hashes are read when the
    /// query names columns alone; other attributes need the items opened (and their class key).
    private func requireVisibleKey(_ dict: AttributeDictionary, publicKey: [UInt8], type: KeyType, scope: AccessScope) throws(KeychainError) {
        var queryDict = dict
        queryDict["class"] = .string(ItemClass.key.rawValue)
        let parsed = try ItemQuery(queryDict, for: .copyMatching)
        let groups = try scope.groups(naming: parsed.accessGroup)
        var plan = store.items.plan(.key, attributes: parsed.attributes, groups: groups, query: parsed)
        let schema = ClassSchema.key
        // Added to the filter rather than the query: a persistent reference may not be joined
        // by attributes in a query, but the row it names must still be this key.
        plan.filter.hashes.append(("kcls", store.codec.hash(schema.spec("kcls")!, .int(KeyItem.privateKeyClass))))
        plan.filter.hashes.append(("klbl", store.codec.hash(schema.spec("klbl")!, .data(SecretBytes(PrivateKey.applicationLabel(of: publicKey))))))
        // The type is checked on the match, not filtered on: a key of another type is
        // errSecParam ("algorithm not supported by the key"), as when the key is opened.
        let typeHash = store.codec.hash(schema.spec("type")!, .int(type.attributeNumber))
        var found: ItemRow?
        if plan.needsOpening {
            let (items, corrupt) = try store.items.find(plan, limit: 1, withAttributes: true)
            guard let item = items.first else { throw SecItems.nothingFound(corrupt: corrupt) }
            found = item.row
        } else {
            try store.table.forEach(plan.filter) { row in
                found = row
                return false
            }
        }
        guard let row = found else { throw KeychainError(.itemNotFound, "no private key with this public key matches the query") }
        guard row.hashes["type"] == typeHash else {
            throw KeychainError(.param, "algorithm not supported by the key: it is not a \(type.rawValue) key")
        }
    }
}

/// A key call whose key's row was read under the store's lock, still sealed: `opened()`
/// decrypts it, decodes its attributes and checks them on the caller's thread, after the
/// lock, so that the lock is held for the row's read alone (docs/performance.md, issue 30).
/// It needs nothing of the store: the row's bytes, its class key and the codec travel with it.
public struct FoundKeyCall: Sendable {
    enum Found: Sendable {
        case row(KeyRow)
        /// A call that needs no private key: an encryption to a public key the caller gave.
        case ready(PreparedKeyCall)
    }

    let found: Found
    let use: PreparedKeyCall.Use

    init(_ found: Found, use: PreparedKeyCall.Use = .publicKey) {
        self.found = found
        self.use = use
    }

    /// The key opened from its row and checked: the call, ready to run (or, sealed under an
    /// application password, ready to be unsealed). The errors the search would give:
    /// errSecDecode for an altered row, errSecItemNotFound when no row matches; errSecParam
    /// when the item is not a private key keychaind uses or `usage` is off.
    public func opened() throws(KeychainError) -> PreparedKeyCall {
        switch found {
        case .ready(let call):
            return call
        case .row(let row):
            let (key, question) = try row.opened()
            return PreparedKeyCall(key, use: use, question: question)
        }
    }
}

/// The row of a key call's key with its class key, and what opening it must check.
struct KeyRow: Sendable {
    let fetched: FetchedRows
    let plan: SearchPlan
    let reader: SplitReader
    let usage: String?
    let prompt: String?
    let mayAsk: Bool

    /// The private key (or, sealed under an application password, its sealed bytes and public
    /// key), with the question its use must ask first when its item has userPresence or
    /// devicePasscode: only the uses its constraint covers ask (sign, agree, decrypt: each
    /// needs a flag); the public key, a verification and an encryption never do.
    func opened() throws(KeychainError) -> (key: OpenedKey, question: KeyUseQuestion?) {
        let opened = try reader.openMatches(fetched, plan: plan, withAttributes: true, wanted: 1)
        guard let item = opened.items.first else { throw SecItems.nothingFound(corrupt: opened.corrupt) }
        guard item.attributes["kcls"] == .int(KeyItem.privateKeyClass) else {
            throw KeychainError(.param, "the item is not a private key (kcls 1)")
        }
        let type = try KeyItem.keyType(named: item.attributes["type"])
        if let usage, item.attributes[usage] != .int(1) {
            throw KeychainError(.param, "the key's \(KeyItem.usageName[usage] ?? usage) is off: algorithm not supported by the key")
        }
        let question = item.asksPerson && usage != nil
            ? KeyUseQuestion(label: item.attributes["labl"]?.stringValue, reason: prompt, mayAsk: mayAsk,
                             keychainPasscode: AccessControl.needsKeychainPasscode(item.accessFlags))
            : nil
        guard item.sealedUnderPassword else { return (OpenedKey(key: try PrivateKey(stored: item.data, type: type)), question) }
        guard case .data(let publicKey)? = item.attributes[KeyItem.sealedPublicKey] else {
            throw KeychainError(.decode, "a key sealed under an application password lacks its public key")
        }
        return (OpenedKey(sealed: SealedKey(layer: item.data, type: type, publicKey: Array(publicKey))), question)
    }
}

/// A key call whose key has been opened (after the store's lock), to be made on any thread:
/// the daemon uses the key outside the lock, so concurrent key calls use every core and a slow
/// one (a KDF over a large shared info, a large decryption) holds nobody up. The key's bytes
/// stay in `SecretBytes` (wiped when the last copy goes), so carrying it leaves nothing in
/// freed memory.
public struct PreparedKeyCall: Sendable {
    enum Use: Sendable {
        case publicKey
        case sign([UInt8], KeySigningAlgorithm)
        case verify(_ signature: [UInt8], _ data: [UInt8], KeySigningAlgorithm)
        case agree(_ peer: [UInt8], KeyAgreementAlgorithm, requestedSize: Int?, sharedInfo: [UInt8])
        /// `to` nil: the opened key's own public key (and its type, whatever this one says).
        case encrypt(SecretBytes, to: [UInt8]?, KeyType, KeyEncryptionAlgorithm)
        case decrypt([UInt8], KeyEncryptionAlgorithm)
    }

    /// nil for an encryption to a public key the caller gave, and for a key still sealed.
    private var key: PrivateKey?
    /// The key's bytes under its application password, until `unsealed`.
    public private(set) var sealed: SealedKey?
    let use: Use
    /// What the person must be asked before the key is used (its item asks first); nil: nothing.
    public let question: KeyUseQuestion?
    /// The person said yes to this one use (`allowedByPerson`).
    private var allowed = false

    init(key: PrivateKey?, use: Use, question: KeyUseQuestion? = nil) {
        self.key = key
        self.use = use
        self.question = question
    }

    init(_ opened: OpenedKey, use: Use, question: KeyUseQuestion? = nil) {
        self.init(key: opened.key, use: use, question: question)
        sealed = opened.sealed
    }

    /// Whether the call needs the private key's bytes that an application password still seals
    /// (sign, decrypt, agree); the public key's uses do not.
    public var needsUnsealing: Bool {
        guard key == nil, sealed != nil else { return false }
        switch use {
        case .sign, .agree, .decrypt: return true
        case .publicKey, .verify, .encrypt: return false
        }
    }

    /// This call with its key's bytes, opened from `sealed` with the application password.
    public func unsealed(_ bytes: SecretBytes) throws(KeychainError) -> PreparedKeyCall {
        guard let sealed else { return self }
        var call = self
        call.key = try PrivateKey(stored: bytes, type: sealed.type)
        call.sealed = nil
        return call
    }

    /// This call, once the person at the prompt allowed it: only then does a key that asks
    /// first sign, decrypt or agree, whatever path runs the call.
    public func allowedByPerson() -> PreparedKeyCall {
        var call = self
        call.allowed = true
        return call
    }

    /// The call's answer, as the daemon sends it: data, or for a verification `valid`.
    public func run() throws(KeychainError) -> ItemResult {
        switch use {
        case .verify(let signature, let data, let algorithm):
            let valid = try PublicKeyVerifier.verify(signature, of: data, publicKey: try publicKey(), type: try keyType(), algorithm: algorithm)
            return .attributes(["valid": .bool(valid)])
        default:
            return .data(try data())
        }
    }

    /// The answer of every call but a verification.
    func data() throws(KeychainError) -> SecretBytes {
        if question != nil && !allowed {
            throw KeychainError(.interactionNotAllowed, "this key is used only after the person at the machine types the keychain passcode, and nobody was asked")
        }
        switch use {
        case .publicKey:
            return SecretBytes(try publicKey())
        case .sign(let data, let algorithm):
            return SecretBytes(try opened().sign(data, algorithm: algorithm))
        case .agree(let peer, let algorithm, let size, let sharedInfo):
            return try opened().agree(with: peer, algorithm: algorithm, requestedSize: size, sharedInfo: sharedInfo)
        case .encrypt(let plaintext, let given, let givenType, let algorithm):
            let publicKey: [UInt8]
            var type = givenType
            if let given { publicKey = given } else { (publicKey, type) = (try self.publicKey(), try keyType()) }
            return SecretBytes(try PublicKeyEncryptor.encrypt(plaintext, to: publicKey, type: type, algorithm: algorithm))
        case .decrypt(let ciphertext, let algorithm):
            return try opened().decrypt(ciphertext, algorithm: algorithm)
        case .verify:
            throw KeychainError(.internal, "a verification answers valid, not data")
        }
    }

    private func opened() throws(KeychainError) -> PrivateKey {
        if let key { return key }
        // The application-password layer is never taken for the key.
        if sealed != nil { throw SecItems.noApplicationPassword }
        throw KeychainError(.internal, "a key call without its key")
    }

    /// The key's public half: a sealed key's is kept beside its sealed bytes.
    private func publicKey() throws(KeychainError) -> [UInt8] {
        if let sealed, key == nil { return sealed.publicKey }
        return try opened().publicKey
    }

    private func keyType() throws(KeychainError) -> KeyType {
        if let sealed, key == nil { return sealed.type }
        return try opened().type
    }
}

/// A private key found for a key call: opened, or still sealed under its application password.
struct OpenedKey: Sendable {
    var key: PrivateKey?
    var sealed: SealedKey?

    init(key: PrivateKey) { self.key = key }
    init(sealed: SealedKey) { self.sealed = sealed }

    var type: KeyType { key?.type ?? sealed!.type }
}

/// A private key sealed under an application password (accc flag applicationPassword): its
/// item's application-password layer (ApplicationPasswordSeal), opened outside the store's
/// lock with the password of the call's context, and the public key stored beside it
/// (`KeyItem.sealedPublicKey`), which the public key's uses need without the password.
public struct SealedKey: Sendable {
    public let layer: SecretBytes
    let type: KeyType
    let publicKey: [UInt8]
}

/// What a key use asks the person before it runs (docs/security.md, "Items that ask first"):
/// the key's label and the caller's `u_OpPrompt`, shown escaped at keychaind's prompt.
public struct KeyUseQuestion: Sendable, Equatable {
    public let label: String?
    public let reason: String?
    /// False under u_AuthUI Fail: errSecInteractionNotAllowed instead of asking.
    public let mayAsk: Bool
    /// Only the keychain passcode answers (devicePasscode): polkit does not count.
    public var keychainPasscode = false
}

/// The parameters dictionary of a key call (docs/protocol.md): named values, checked here.
struct KeyCallParameters {
    let values: AttributeDictionary

    init(_ values: AttributeDictionary) { self.values = values }

    func signingAlgorithm() throws(KeychainError) -> KeySigningAlgorithm {
        guard case .string(let name)? = values["algorithm"], let algorithm = KeySigningAlgorithm(rawValue: name) else {
            throw KeychainError(.param, "algorithm must be one of \(KeySigningAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return algorithm
    }

    /// A data parameter; data that is not secret (messages, signatures, public keys).
    func bytes(_ name: String) throws(KeychainError) -> [UInt8] {
        guard case .data(let d)? = values[name] else { throw KeychainError(.param, "the call needs \(name) as data") }
        return Array(d)
    }
}

extension KeyCallParameters {
    public func encryptionAlgorithm() throws(KeychainError) -> KeyEncryptionAlgorithm {
        guard case .string(let name)? = values["algorithm"], let algorithm = KeyEncryptionAlgorithm(rawValue: name) else {
            throw KeychainError(.param, "algorithm must be one of \(KeyEncryptionAlgorithm.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return algorithm
    }

    /// A data parameter that may be secret (a plaintext): kept in wiped memory.
    public func secret(_ name: String) throws(KeychainError) -> SecretBytes {
        guard case .data(let d)? = values[name] else { throw KeychainError(.param, "the call needs \(name) as data") }
        return d
    }
}
