import KeychainModel
import KeychainProtocol
import KeychainStore

/// The daemon's lock state as `keychain status` shows it, derived from which class keys the
/// store holds (the full state machine with its events is issue 4).
public enum LockState: String, Sendable {
    case lockedSinceBoot, unlocked, locked

    init(_ store: ItemStore) {
        if !store.hasPasscode || store.isAvailable(.whenUnlocked) {
            self = .unlocked
        } else if store.isAvailable(.afterFirstUnlock) {
            self = .locked
        } else {
            self = .lockedSinceBoot
        }
    }
}

/// Turns one request into one response against the store. Runs on the store's own thread
/// only (StoreExecutor), so it needs no locking of its own.
struct RequestHandler {
    let store: ItemStore
    let policy: AccessPolicy
    static let version = "0.1.0"

    func handle(_ request: Request, from caller: Caller) -> Response {
        do {
            return try perform(request, caller: caller)
        } catch {
            return Response(error: error)
        }
    }

    private func perform(_ request: Request, caller: Caller) throws(KeychainError) -> Response {
        if request.isAdministrative && !policy.isAdmin(caller) {
            throw KeychainError(.missingEntitlement, "\(request.operation) is an admin call; uid \(caller.uid) is not an admin of this keychaind")
        }
        let scope = policy.scope(for: caller)
        switch request {
        case .add(let dict):
            return Response(result: try store.add(dict, scope: scope))
        case .copyMatching(let dict):
            return Response(result: try store.copyMatching(dict, scope: scope))
        case .update(let query, let changes):
            try store.update(query, changes: changes, scope: scope)
        case .delete(let dict):
            try store.delete(dict, scope: scope)
        case .status:
            let info: AttributeDictionary = [
                "version": .string(Self.version),
                "state": .string(LockState(store).rawValue),
                "passcode": .bool(store.hasPasscode),
                "groups": .string(scope.groups.joined(separator: ",")),
            ]
            return Response(result: .single(.attributes(info)))
        case .lock:
            store.lock()
        case .unlock(let passcode):
            if store.hasPasscode {
                try store.unlock(passcode: passcode)
            } else {
                try store.unlockWithoutPasscode()
            }
        case .setPasscode(let new):
            try store.setPasscode(new)
        case .changePasscode(let old, let new):
            try store.changePasscode(old: old, new: new)
        case .removePasscode(let current):
            try store.removePasscode(current: current)
        }
        return Response()
    }
}
