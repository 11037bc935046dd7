import KeychainCrypto
import KeychainModel
import KeychainProtocol
import KeychainStore
import KeychainSync
import Synchronization

/// The sync calls (ops 32-39; docs/sync.md 7.4). The admin membership calls each open their
/// own short-lived PostgreSQL connection (they are rare); the calls any local user may make
/// (status's refresh, devices) share one kept connection; `sync now` asks the sync thread for
/// a pass. They reach the store only through `store`, which takes the store's lock
/// for one step at a time: never across a statement.
final class SyncCalls: Sendable {
    /// The libpq conninfo of `[sync] database`; nil: sync is not configured.
    let database: String?
    /// The sync thread, once it can run.
    let loop: DaemonSyncLoop
    /// The longest `sync now` waits for its pass (the client's own timeout is 60 s).
    static let syncNowTimeout: Duration = .seconds(30)
    /// The last failure of a call that talked to the database, for status (no secret in it:
    /// messages of KeychainSync never carry keys or the conninfo's password).
    private let lastError = Mutex<KeychainError?>(nil)
    /// The connection of status refreshes and device lists, kept between calls: a flood of
    /// them from any local user queues on it instead of opening a PostgreSQL session each.
    private let readConnection = Mutex<PostgresConnection?>(nil)

    init(database: String?, timing: SyncLoop.Timing = SyncLoop.Timing(), log: @escaping @Sendable (String) -> Void = { _ in }) {
        self.database = database
        loop = DaemonSyncLoop(database: database, timing: timing, log: log)
    }

    static let notConfigured = KeychainError(.notAvailable,
        "sync is not configured: set `database` in the [sync] section of keychaind.toml (a libpq conninfo without a password)")

    /// `admin`: whether the caller is an admin, who alone sees what PostgreSQL said of a
    /// failure (SyncFailureForCaller).
    func run<Store: SyncLocalStore & Sendable>(_ request: Request, store: Store, admin: Bool) -> Response {
        let response = answer(request, store: store, admin: admin)
        // Create and join make a circle row for a thread to start on. A status is polled by
        // monitors, so it wakes the thread only when it found this device approved.
        loop.startIfReady(store: store)
        if request != .syncNow && request != .syncStatus { loop.wake() }
        return response
    }

    private func answer(_ request: Request, store: some SyncLocalStore, admin: Bool) -> Response {
        do throws(KeychainError) {
            guard database != nil else { throw Self.notConfigured }
            switch request {
            case .syncNow:
                guard try loop.runPassNow(timeout: Self.syncNowTimeout) else { throw try notRunning(store) }
                return Response()
            case .syncStatus:
                // A status refreshes the roster first when it can (a pending device learns at
                // once that it was approved); failing that it still answers, with the failure as
                // its last error. On the kept connection: a status polled in a loop costs the
                // database a few reads, never a session each. While another call uses that
                // connection it answers without the refresh: a status must not queue behind
                // another local user's, which a silent database host holds for connect_timeout.
                if (try store.withReplica { (s) throws(KeychainError) in try LocalCircle(s).row() }) != nil {
                    _ = try? readingIfIdle { (db) throws(KeychainError) in
                        switch try SyncMembership.refresh(store: store, database: db) {
                        case .forked(let why): noteError(KeychainError(.decode, "sync is stopped: \(why)"))
                        case .becameMember, .newEpoch: loop.wake()  // its next pass need not wait
                        case .verified, .notInCircle, .removed: break
                        }
                    }
                }
                let report = try SyncMembership.status(store: store)
                let inbox = try store.withReplica { (s) throws(KeychainError) in try PulledRows(s).inboxCount() }
                return Response(result: .single(.attributes(statusAttributes(report, inbox: inbox, admin: admin))))
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
            case .syncRemove(let device):
                let typed = try SyncFingerprint(typed: device)
                let count = try talking { (db) throws(KeychainError) in try SyncRotation.remove(device: typed, store: store, database: db) }
                let epoch = try SyncMembership.status(store: store).epoch
                return Response(result: .single(.attributes(["device": .string(typed.digits), "epoch": .int(Int64(epoch)),
                                                             "resealed": .int(Int64(count.resealed)),
                                                             "dropped": .int(Int64(count.dropped))])))
            case .syncLeave:
                try talking { (db) throws(KeychainError) in try SyncRotation.leave(store: store, database: db) }
                return Response(result: .none)
            case .syncDevices:
                let devices = try reading { (db) throws(KeychainError) in try SyncMembership.devices(store: store, database: db) }
                return Response(result: .list(devices.map { .attributes(Self.attributes($0)) }))
            default:
                throw KeychainError(.internal, "\(request.operation) is not a sync call")
            }
        } catch {
            return Response(error: SyncFailureForCaller.shown(error, admin: admin))
        }
    }

    private func talking<T>(_ body: (SyncDatabase) throws(KeychainError) -> T) throws(KeychainError) -> T {
        try noting { () throws(KeychainError) -> T in
            guard let database else { throw Self.notConfigured }
            let connection = try PostgresConnection(database)
            defer { connection.close() }
            return try body(SyncDatabase(connection))
        }
    }

    /// `talking` for the calls of any local user, on the kept connection. A kept connection
    /// the server has dropped since fails the first try; the call is a read (a refresh only
    /// writes what it verified), so it runs once more on a new connection.
    private func reading<T: Sendable>(_ body: (SyncDatabase) throws(KeychainError) -> T) throws(KeychainError) -> T {
        try noting { () throws(KeychainError) -> T in
            guard let database else { throw Self.notConfigured }
            return try readConnection.withLock { (kept) throws(KeychainError) -> T in try Self.run(body, on: &kept, database) }
        }
    }

    /// `reading` if no other call is using the kept connection; nil (nothing noted) if one is.
    private func readingIfIdle<T: Sendable>(_ body: (SyncDatabase) throws(KeychainError) -> T) throws(KeychainError) -> T? {
        guard let database else { throw Self.notConfigured }
        let outcome = readConnection.withLockIfAvailable { (kept) -> Result<T, KeychainError> in
            do throws(KeychainError) {
                return .success(try Self.run(body, on: &kept, database))
            } catch {
                return .failure(error)
            }
        }
        guard let outcome else { return nil }
        return try noting { () throws(KeychainError) -> T in try outcome.get() }
    }

    private static func run<T: Sendable>(_ body: (SyncDatabase) throws(KeychainError) -> T, on kept: inout sending PostgresConnection?,
                               _ database: String) throws(KeychainError) -> T {
        if let connection = kept {
            do throws(KeychainError) {
                return try body(SyncDatabase(connection))
            } catch {
                connection.close()
                kept = nil
            }
        }
        let connection = try PostgresConnection(database)
        do throws(KeychainError) {
            let result = try body(SyncDatabase(connection))
            kept = connection
            return result
        } catch {
            connection.close()
            throw error
        }
    }

    /// Runs a call to the database and keeps its outcome as status's last error.
    private func noting<T>(_ call: () throws(KeychainError) -> T) throws(KeychainError) -> T {
        do throws(KeychainError) {
            let result = try call()
            noteError(nil)
            return result
        } catch {
            // A refusal of what the caller typed is not the sync's failure.
            if error.status != .itemNotFound && error.status != .param && error.status != .duplicateItem {
                noteError(error)
            }
            throw error
        }
    }

    private func noteError(_ error: KeychainError?) { lastError.withLock { $0 = error } }

    /// Why no sync thread runs, as `sync now`'s error.
    private func notRunning(_ store: some SyncLocalStore) throws(KeychainError) -> KeychainError {
        switch try SyncMembership.status(store: store).state {
        case "off": KeychainError(.notAvailable, "this keychain is in no sync circle: `keychain sync create` or `keychain sync join`")
        case "waitingForUnlock": KeychainError(.interactionNotAllowed, "sync starts at the first unlock since keychaind started: `keychain unlock`")
        case SyncCircleState.forked: KeychainError(.decode, "sync is stopped: the sync database's roster disagrees with the one this device verified")
        case SyncCircleState.removed: KeychainError(.notAvailable, "this device was removed from the sync circle: it syncs no more and keeps its items")
        default: KeychainError(.notAvailable, "the sync thread is not running (see keychaind's log)")
        }
    }

    /// The sync thread's state: off, waitingForUnlock, pending, forked, or (for a member)
    /// rolledBack while a rollback of the store is not healed, partitioned while a head names
    /// a roster the store withholds, else the loop's connecting, ok or error.
    private static func loopState(_ membership: String, _ loop: DaemonSyncLoop.Report?) -> String {
        switch (membership, loop?.totals.store) {
        case ("off", _), ("waitingForUnlock", _), (SyncCircleState.pending, _), (SyncCircleState.forked, _), (SyncCircleState.removed, _):
            membership
        case (_, .rolledBack?): "rolledBack"
        case (_, .partitioned?): "partitioned"
        default: loop?.status.state.rawValue ?? "off"
        }
    }

    private func statusAttributes(_ report: SyncStatusReport, inbox: Int, admin: Bool) -> AttributeDictionary {
        var out: AttributeDictionary = [
            "state": .string(report.state), "epoch": .int(Int64(report.epoch)),
            "members": .int(Int64(report.members)), "outbox": .int(Int64(report.outbox)),
        ]
        if let circle = report.circleFingerprint { out["circle"] = .string(circle.digits) }
        if let device = report.deviceFingerprint { out["device"] = .string(device.digits) }
        let running = loop.report
        out["loop"] = .string(Self.loopState(report.state, running))
        out["inbox"] = .int(Int64(inbox))
        if let running {
            let totals = running.totals
            out["pushed"] = .int(Int64(totals.pushed))
            out["pulled"] = .int(Int64(totals.pulled))
            out["applied"] = .int(Int64(totals.applied))
            out["rejected"] = .int(Int64(totals.rejected))
            out["rollbacks_healed"] = .int(Int64(totals.rollbacksHealed))
            out["heads_rejected"] = .int(Int64(totals.headsRejected))
            if let why = totals.lastRollback { out["last_rollback"] = .string(why) }
            if let last = running.status.lastSuccessfulPass { out["last_pass"] = .int(last) }
        }
        // The thread's error while it runs (nil once a pass succeeds), else the last call's.
        if let error = running.map({ $0.status.lastFailure }) ?? lastError.withLock({ $0 }) {
            out["last_error"] = .string(SyncFailureForCaller.shown(error, admin: admin).description)
        }
        return out
    }

    private static func attributes(_ device: SyncDeviceListing) -> AttributeDictionary {
        ["id": .string(device.id.description), "fingerprint": .string(device.fingerprint.digits),
         "name": .string(device.name), "member": .bool(device.isMember)]
    }
}
