import DBus
import KeychainModel

/// One transfer session: how secrets travel between the bridge and the connection that opened
/// it (spec §6–7). A DH session holds its AES key; a plain one sends secrets as they are.
struct TransferSession {
    enum Algorithm: String {
        case plain
        case dh = "dh-ietf1024-sha256-aes128-cbc-pkcs7"
    }

    let owner: String
    /// The executable of the owner's process: sessions are counted per app too.
    let app: ExecutableStamp
    let key: SecretBytes?

    /// A secret for the client: (parameters, value).
    func encode(_ secret: SecretBytes) throws(BusErrorReply) -> (parameters: [UInt8], value: BusValue) {
        guard let key else { return ([], .secret(secret)) }
        do {
            let (iv, ciphertext) = try SessionCrypto.encrypt(secret, key: key)
            return (iv, .bytes(ciphertext))
        } catch {
            throw BusErrorReply(error)
        }
    }

    /// A secret from the client; anything that does not decrypt is InvalidArgs.
    func decode(parameters: [UInt8], value: SecretBytes) throws(BusErrorReply) -> SecretBytes {
        guard let key else { return value }
        do {
            return try SessionCrypto.decrypt(Array(value), iv: parameters, key: key)
        } catch {
            throw BusErrorReply(error)
        }
    }
}

/// The open sessions, by path, each belonging to the connection that opened it: another
/// connection naming the path gets NoSession. Bounded per connection, per app (executable: one
/// app's many connections cannot take every session from the user's other apps) and in all.
struct SessionTable {
    static let perConnection = 16
    static let perApp = 128
    static let total = 1024
    static let pathPrefix = "/org/freedesktop/secrets/session/"

    private var sessions: [String: TransferSession] = [:]
    private var counts: [String: Int] = [:]
    private var appCounts: [ExecutableStamp: Int] = [:]
    private var nextNumber: UInt64 = 1

    var count: Int { sessions.count }

    /// Service.OpenSession: the output variant and the new session's path.
    mutating func open(algorithm name: String, input: BusValue, owner: String, app: ExecutableStamp) throws(BusErrorReply) -> (output: BusValue, path: String) {
        guard let algorithm = TransferSession.Algorithm(rawValue: name) else {
            throw .notSupported("the algorithm \(name) is not supported; use \(TransferSession.Algorithm.dh.rawValue) or plain")
        }
        guard counts[owner, default: 0] < Self.perConnection else {
            throw .limitsExceeded("a connection may hold at most \(Self.perConnection) sessions; close some")
        }
        guard appCounts[app, default: 0] < Self.perApp else {
            throw .limitsExceeded("an app (one executable) may hold at most \(Self.perApp) sessions; close some")
        }
        guard sessions.count < Self.total else {
            throw .limitsExceeded("the Secret Service holds \(Self.total) sessions already")
        }
        let session: TransferSession
        let output: BusValue
        switch algorithm {
        case .plain:
            // Any string is accepted (libsecret and secretstorage send "").
            guard case .string = input else { throw .invalidArgs("the plain algorithm takes a string input") }
            session = TransferSession(owner: owner, app: app, key: nil)
            output = .string("")
        case .dh:
            guard case .bytes(let clientPublic) = input else {
                throw .invalidArgs("the \(algorithm.rawValue) algorithm takes the client's public value as a byte array")
            }
            do {
                let agreed = try SessionCrypto.agree(clientPublic: clientPublic)
                session = TransferSession(owner: owner, app: app, key: agreed.key)
                output = .bytes(agreed.serverPublic)
            } catch {
                throw BusErrorReply(error)
            }
        }
        let path = Self.pathPrefix + String(nextNumber)
        nextNumber += 1
        sessions[path] = session
        counts[owner, default: 0] += 1
        appCounts[app, default: 0] += 1
        return (output, path)
    }

    /// The session at `path`, if `sender` opened it; else NoSession.
    func session(_ path: String, of sender: String) throws(BusErrorReply) -> TransferSession {
        guard let session = sessions[path], session.owner == sender else { throw .noSession(path) }
        return session
    }

    /// Session.Close.
    mutating func close(_ path: String, of sender: String) throws(BusErrorReply) {
        let closed = try session(path, of: sender)
        sessions[path] = nil
        counts[sender, default: 1] -= 1
        if counts[sender] == 0 { counts[sender] = nil }
        release(closed.app, 1)
    }

    private mutating func release(_ app: ExecutableStamp, _ count: Int) {
        appCounts[app, default: count] -= count
        if appCounts[app] == 0 { appCounts[app] = nil }
    }

    /// Every session of a connection that left the bus (its keys go with them); how many.
    mutating func removeAll(of owner: String) -> Int {
        guard let count = counts[owner] else { return 0 }
        for session in sessions.values where session.owner == owner { release(session.app, 1) }
        sessions = sessions.filter { $0.value.owner != owner }
        counts[owner] = nil
        return count
    }

    mutating func removeAll() {
        sessions = [:]
        counts = [:]
        appCounts = [:]
    }
}
