import KeychainModel
import KeychainSync

/// What a sync failure tells a caller who is not an admin (status's last error, and the
/// errors of `sync status`, `devices` and `now`, which any admitted local user may call).
/// libpq's messages name the database's host, port, user and name, and the passfile's path:
/// the operator's business, not every local user's. A failure that came from PostgreSQL is
/// shown as a fixed phrase for its kind with its own OSStatus; keychaind's own failures (a
/// forked roster, a removal, an epoch without its key) carry none of that and pass as they are.
enum SyncFailureForCaller {
    static func shown(_ error: KeychainError, admin: Bool) -> KeychainError {
        guard !admin, let failure = error.underlying as? PostgresFailure else { return error }
        return KeychainError(error.status, phrase(failure, status: error.status), underlying: failure)
    }

    static func phrase(_ failure: PostgresFailure, status: KeychainStatus) -> String {
        switch failure.kind {
        case .connect where status == .authFailed: "the sync database refused the login"
        case .connect, .connectionLost, .timedOut: "the sync database is unreachable"
        case .badConnectionString: "the sync database setting is not valid"
        case .server, .unreadableResult: "the sync database returned an error"
        }
    }
}
