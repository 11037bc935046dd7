import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore
import KeychainSync
import Synchronization

/// The sync membership calls (ops 32-35, 37; docs/sync.md 7.4). Each opens its own short-lived
/// PostgreSQL connection (they are rare admin calls) and reaches the store only through
/// `store`, which takes the store's lock for one step at a time: never across a statement.
final class SyncCalls: Sendable {
    /// The libpq conninfo of `[sync] database`; nil: sync is not configured.
    let database: String?
    /// The last failure of a call that talked to the database, for status (no secret in it:
    /// messages of KeychainSync never carry keys or the conninfo's password).
    private let lastError = Mutex<String?>(nil)

    init(database: String?) { self.database = database }

    static let notConfigured = KeychainError(.notAvailable,
        "sync is not configured: set `database` in the [sync] section of keychaind.toml (a libpq conninfo without a password)")

    func run(_ request: Request, store: some SyncLocalStore) -> Response {
        do throws(KeychainError) {
            guard database != nil else { throw Self.notConfigured }
            switch request {
            case .syncStatus:
                // A status refreshes the roster first when it can (a pending device learns it was
                // approved this way until the sync loop exists); failing that it still answers,
                // with the failure as its last error.
                if (try store.withStore { (s) throws(KeychainError) in try s.syncCircle() }) != nil {
                    _ = try? talking { (db) throws(KeychainError) in
                        if case .forked(let why) = try SyncMembership.refresh(store: store, database: db) { noteError(why) }
                    }
                }
                return Response(result: .single(.attributes(statusAttributes(try SyncMembership.status(store: store)))))
            case .syncCreate(let name):
                let made = try talking { (db) throws(KeychainError) in try SyncMembership.create(name: name, store: store, database: db) }
                return Response(result: .single(.attributes(["circle": .string(made.circle.digits), "device": .string(made.device.digits)])))
            case .syncJoin(let circle, let name):
                let typed = try SyncFingerprint(typed: circle)
                let own = try talking { (db) throws(KeychainError) in
                    try SyncMembership.join(circle: typed, name: name, store: store, database: db)
                }
                return Response(result: .single(.attributes(["device": .string(own.digits), "circle": .string(typed.digits)])))
            case .syncApprove(let device):
                let typed = try SyncFingerprint(typed: device)
                let approved = try talking { (db) throws(KeychainError) in try SyncMembership.approve(device: typed, store: store, database: db) }
                return Response(result: .single(.attributes(Self.attributes(approved))))
            case .syncDevices:
                let devices = try talking { (db) throws(KeychainError) in try SyncMembership.devices(store: store, database: db) }
                return Response(result: .list(devices.map { .attributes(Self.attributes($0)) }))
            default:
                throw KeychainError(.internal, "\(request.operation) is not a sync call")
            }
        } catch {
            return Response(error: error)
        }
    }

    private func talking<T>(_ body: (SyncDatabase) throws(KeychainError) -> T) throws(KeychainError) -> T {
        do throws(KeychainError) {
            guard let database else { throw Self.notConfigured }
            let connection = try PostgresConnection(database)
            defer { connection.close() }
            let result = try body(SyncDatabase(connection))
            noteError(nil)
            return result
        } catch {
            // A refusal of what the caller typed is not the sync's failure.
            if error.status != .itemNotFound && error.status != .param && error.status != .duplicateItem {
                noteError(error.message)
            }
            throw error
        }
    }

    private func noteError(_ message: String?) { lastError.withLock { $0 = message } }

    private func statusAttributes(_ report: SyncStatusReport) -> AttributeDictionary {
        var out: AttributeDictionary = [
            "state": .string(report.state), "epoch": .int(Int64(report.epoch)),
            "members": .int(Int64(report.members)), "outbox": .int(Int64(report.outbox)),
        ]
        if let circle = report.circleFingerprint { out["circle"] = .string(circle.digits) }
        if let device = report.deviceFingerprint { out["device"] = .string(device.digits) }
        if let error = lastError.withLock({ $0 }) { out["last_error"] = .string(error) }
        return out
    }

    private static func attributes(_ device: SyncDeviceListing) -> AttributeDictionary {
        ["id": .string(device.id.description), "fingerprint": .string(device.fingerprint.digits),
         "name": .string(device.name), "member": .bool(device.isMember)]
    }
}
