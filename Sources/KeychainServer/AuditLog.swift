#if canImport(Glibc)
import Glibc
#endif
import Foundation
import KeychainModel
import KeychainProtocol
import Synchronization

/// The audit trail: one JSON line per call (time, caller uid/pid/app, operation, class,
/// access group, result code) appended to a 0600 file. Never a secret; service, account and
/// server only when the config asks. A full disk or any write error is logged once and
/// serving goes on: an audit log must not take the keychain down.
final class AuditLog: Sendable {
    private let fd: Int32
    private let includeNames: Bool
    /// Whether the last write failed (so a failure is logged once, and the recovery once).
    /// Held while a line is written, so that lines from several threads never interleave.
    private let failing = Mutex(false)
    private let log: @Sendable (String) -> Void

    init(path: String, includeNames: Bool, log: @escaping @Sendable (String) -> Void) throws {
        do {
            fd = try SystemCall.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        } catch {
            throw error.keychainError("cannot open the audit log \(path)")
        }
        self.includeNames = includeNames
        self.log = log
    }

    deinit { close(fd) }

    func record(_ request: Request, caller: Caller, app: String, defaultGroup: String?, response: Response,
                bridgePID: Int32? = nil) {
        var fields: [(String, String)] = [
            ("time", JSONText.quote(JSONText.iso8601(unix: DaemonClock.system.wall(), milliseconds: true))),
            ("uid", String(caller.uid)),
            ("pid", String(caller.pid)),
            ("app", JSONText.quote(app)),
            ("op", JSONText.quote("\(request.operation)")),
            ("status", String(response.status)),
        ]
        if let bridgePID {
            fields.append(("via", JSONText.quote("secret-service")))
            fields.append(("bridge_pid", String(bridgePID)))
        }
        // The portal is the caller; the sandboxed app it asked for is who the secret is for.
        if let appID = Self.portalApp(of: request) { fields.append(("portal_app", JSONText.quote(appID))) }
        if let query = Self.query(of: request) {
            if case .string(let cls)? = query["class"] { fields.append(("class", JSONText.quote(cls))) }
            // The group the call named; else where an add goes, or "*" for all of the caller's.
            let group: String
            if case .string(let g)? = query["agrp"] {
                group = g
            } else if case .add = request {
                group = defaultGroup ?? ""
            } else {
                group = "*"
            }
            fields.append(("group", JSONText.quote(group)))
            if includeNames {
                for (code, name) in [("svce", "service"), ("acct", "account"), ("srvr", "server")] {
                    if case .string(let v)? = query[code] { fields.append((name, JSONText.quote(v))) }
                }
            }
        }
        let line = Array((JSONText.object(fields) + "\n").utf8)
        let news: String? = failing.withLock { failing in
            // A line cut short by a signal or a nearly full disk is finished, not left half
            // written for the next one to run into.
            let written = line.withUnsafeBytes { b in Result { () throws(SystemCallError) in try SystemCall.writeAll(fd, b) } }
            defer { failing = written.isFailure }
            switch written {
            case .failure(let error) where !failing: return "audit log write failed (\(error.reason)); serving goes on, audit lines are being lost"
            case .success where failing: return "audit log writes work again"
            default: return nil
            }
        }
        if let news { log(news) }
    }

    private static func portalApp(of request: Request) -> String? {
        switch request {
        case .portalSecret(let appID): appID
        case .asCaller(_, _, let inner): portalApp(of: inner)
        default: nil
        }
    }

    private static func query(of request: Request) -> AttributeDictionary? {
        switch request {
        case .add(let d), .copyMatching(let d), .delete(let d), .attributeAdd(let d, _), .keyGenerate(let d), .keyPublic(let d): d
        case .update(let q, _), .keySign(let q, _), .keyVerify(let q, _), .keyAgree(let q, _): q
        case .asCaller(_, _, let inner): query(of: inner)
        case .keyEncrypt(let q, _), .keyDecrypt(let q, _): q
        default: nil
        }
    }
}

private extension Result {
    var isFailure: Bool {
        if case .failure = self { return true }
        return false
    }
}
