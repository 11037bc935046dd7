#if canImport(Glibc)
import Glibc
#endif
import CSystemShim
import KeychainModel
import KeychainProtocol
import KeychainStore
import Synchronization

/// One change a subscriber may be told of (op 47).
struct ChangeNotice: Sendable {
    enum What: Sendable {
        case item(SecretServiceChange)
        case lockState(locked: Bool)
    }

    let what: What
    /// The process whose connection made the change (for a call the bridge made for another
    /// process, the bridge's), so that a subscriber can tell its own changes from others'.
    let writerPID: Int32
    let writerUID: uid_t
}

/// The subscribers of change notices and what each has not been sent yet. Writers publish
/// after their commit; each subscriber's connection thread is woken through its own pipe and
/// sends what its caller may know of (Server.serveNotices).
final class ChangeNotices: Sendable {
    /// A subscriber falling this far behind gets one "unknown" notice in place of its queue:
    /// a flood of writes costs it a re-read, not the daemon's memory.
    static let maxPending = 4096
    /// Subscriptions one uid may hold at once. Each keeps a connection and its thread open
    /// without the idle timeout; a bridge needs one, so a few spare suffice, and a flood of idle
    /// subscribers from one uid is refused before it can take the daemon's connections.
    static let maxPerUID = 4

    final class Subscription: Sendable {
        /// An eventfd: readable while notices wait.
        let wake: Int32
        let uid: uid_t
        fileprivate let pending = Mutex<[ChangeNotice]>([])

        fileprivate init(wake: Int32, uid: uid_t) {
            self.wake = wake
            self.uid = uid
        }

        deinit {
            close(wake)
        }

        /// The notices queued since the last take, the wake-up counter reset.
        func take() -> [ChangeNotice] {
            var count: UInt64 = 0
            _ = read(wake, &count, 8)
            return pending.withLock { queue in
                defer { queue.removeAll(keepingCapacity: true) }
                return queue
            }
        }
    }

    private let subscribers = Mutex<[ObjectIdentifier: Subscription]>([:])
    private let listening = Atomic<Bool>(false)

    /// Whether anyone subscribes: writers note their changes only then.
    var hasSubscribers: Bool { listening.load(ordering: .relaxed) }

    func subscribe(uid: uid_t) throws(KeychainError) -> Subscription {
        let wake = csystem_eventfd()
        guard wake >= 0 else {
            throw KeychainError(.allocate, "cannot make a change-notice eventfd: \(String(cString: strerror(errno)))")
        }
        let subscription = Subscription(wake: wake, uid: uid)
        let admitted = subscribers.withLock {
            guard $0.values.count(where: { $0.uid == uid }) < Self.maxPerUID else { return false }
            $0[ObjectIdentifier(subscription)] = subscription
            listening.store(true, ordering: .relaxed)
            return true
        }
        guard admitted else {
            throw KeychainError(.allocate, "uid \(uid) already holds \(Self.maxPerUID) change-notice subscriptions")
        }
        return subscription
    }

    func unsubscribe(_ subscription: Subscription) {
        subscribers.withLock {
            $0[ObjectIdentifier(subscription)] = nil
            listening.store(!$0.isEmpty, ordering: .relaxed)
        }
    }

    /// Queues `notices` for every subscriber and wakes each.
    func publish(_ notices: [ChangeNotice]) {
        guard !notices.isEmpty, hasSubscribers else { return }
        let all = subscribers.withLock { Array($0.values) }
        for subscription in all {
            subscription.pending.withLock { queue in
                queue.append(contentsOf: notices)
                if queue.count > Self.maxPending {
                    let unknown = SecretServiceChange(kind: .unknown, persistentRef: [], service: "", accessGroup: "")
                    queue = [ChangeNotice(what: .item(unknown), writerPID: 0, writerUID: 0)]
                }
            }
            var one: UInt64 = 1
            _ = write(subscription.wake, &one, 8)
        }
    }

    /// What `subscriber` is told of `notice`, or nil when it may not know of it: an item's
    /// change goes to a subscriber holding the item's group, and to a configured bridge of the
    /// writer's own uid (the bridge may act for any process of its uid, so it learns nothing
    /// it could not read); a lock-state change and a change of no known group (a restore, a
    /// sync pull, the overflow notice) go to every subscriber; an item deleted while locked
    /// is unnamed but goes only where its group may be heard of, so that another user does not
    /// learn when this user's locked items are deleted.
    static func describe(_ notice: ChangeNotice, subscriberPID: Int32, subscriberUID: uid_t, groups: [String],
                         isBridge: Bool) -> AttributeDictionary? {
        switch notice.what {
        case .lockState(let locked):
            return ["kind": .string("lock"), "locked": .bool(locked)]
        case .item(let change) where change.kind == .unknown && change.accessGroup.isEmpty:
            return ["kind": .string("unknown")]
        case .item(let change):
            guard groups.contains(change.accessGroup) || (isBridge && notice.writerUID == subscriberUID) else { return nil }
            // An item deleted while its class was locked: its group is known, nothing else.
            if change.kind == .unknown { return ["kind": .string("unknown")] }
            return ["kind": .string(change.kind.rawValue), "v_PersistentRef": .data(change.persistentRef),
                    "svce": .string(change.service), "own": .bool(notice.writerPID == subscriberPID)]
        }
    }
}
