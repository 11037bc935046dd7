import Foundation
import KeychainClient

/// An item that asks the person first (accc with userPresence or devicePasscode), named in an
/// Unlock: the path the client gave, and the item it is.
struct AskingItem: Sendable {
    let askedPath: String
    /// The item's own path (not through an alias): what a later GetSecret names it by.
    let path: String
    let id: ItemID
    let service: String
}

/// One secret keychaind gave after the person's yes, for the connection that asked.
struct GrantedSecret: Sendable {
    let path: String
    let secret: SecretBytes
    let contentType: String
}

/// The Unlock prompt of items that ask first (docs/secret-service.md, "Items that ask
/// first"): the bridge has no prompt of its own, so it reads each item for the D-Bus caller
/// (op 16) on the prompt's thread, and keychaind's own prompt asks the person, naming that
/// caller's executable. nil when the person cancelled, a passcode was wrong three times, or
/// nothing could ask: the prompt is then dismissed.
struct PresenceRead: Sendable {
    let keychain: DelegatedKeychain
    let items: [AskingItem]

    static let reason = "read through the Secret Service (org.freedesktop.secrets)"

    func run() -> [GrantedSecret]? {
        var granted: [GrantedSecret] = []
        for item in items {
            do {
                let found = try keychain.copyMatching(["v_PersistentRef": .data(item.id.persistentRef), "r_Attributes": .bool(true),
                                                       "r_Data": .bool(true), "u_OpPrompt": .string(Self.reason)])
                guard case .single(.attributes(let attributes)) = found, attributes["svce"]?.stringValue == item.service,
                      let secret = attributes["v_Data"]?.bytesValue else { return nil }
                granted.append(GrantedSecret(path: item.path, secret: secret, contentType: attributes["xsct"]?.stringValue ?? "text/plain"))
            } catch {
                BridgeLog.info("prompt for an item that asks first ended: \(error.message)")
                return nil
            }
        }
        return granted
    }
}

/// What the person allowed each connection to read, until it is read: one GetSecret or
/// GetSecrets per yes, within `lifetime` of the answer, by the connection that asked. Gone when
/// the connection leaves the bus or keychaind locks.
struct PresenceGrants {
    static let lifetime: Double = 30
    /// Items one Unlock may ask for (each is a question to the person).
    static let itemsPerPrompt = 16

    private struct Grant {
        let secret: SecretBytes
        let contentType: String
        let expires: Double
    }

    private var grants: [String: [String: Grant]] = [:]

    mutating func add(_ granted: [GrantedSecret], for connection: String, now: Double = ProcessInfo.processInfo.systemUptime) {
        for secret in granted {
            grants[connection, default: [:]][secret.path] = Grant(secret: secret.secret, contentType: secret.contentType,
                                                                  expires: now + Self.lifetime)
        }
    }

    /// Whether `connection` may read the item at `path` once without being asked again.
    func holds(_ path: String, of connection: String, now: Double = ProcessInfo.processInfo.systemUptime) -> Bool {
        grants[connection]?[path].map { $0.expires > now } ?? false
    }

    /// The secret, taken: a second read asks again.
    mutating func take(_ path: String, of connection: String,
                       now: Double = ProcessInfo.processInfo.systemUptime) -> (secret: SecretBytes, contentType: String)? {
        guard let grant = grants[connection]?.removeValue(forKey: path) else { return nil }
        if grants[connection]?.isEmpty == true { grants[connection] = nil }
        return grant.expires > now ? (grant.secret, grant.contentType) : nil
    }

    mutating func remove(connection: String) { grants[connection] = nil }

    mutating func removeAll() { grants = [:] }
}
