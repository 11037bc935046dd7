#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainModel
import Logging

/// Which of the host's session events lock the keychain (`lock_on_session_events`).
public enum SessionEventLocking: String, Sendable, Equatable {
    /// A lock of a login session of the daemon's own uid, and the machine going to sleep.
    case ownSessions = "own-sessions"
    /// None: the system daemon serves services, which no user's session event should lock.
    case off

    /// When the config does not say: root's daemon is the system one (root logging in on a
    /// console must not lock what serves every service); any other uid's is that user's.
    public static func `default`(forUID uid: uid_t) -> SessionEventLocking {
        uid == 0 ? .off : .ownSessions
    }
}

/// Locks the keychain when systemd-logind reports that a login session of the daemon's uid
/// locked (screen lock, `loginctl lock-session`) or that the machine is about to sleep.
/// Logout needs nothing here: when a user's last session ends, systemd stops the user manager
/// and the user's daemon with it.
///
/// Signals are taken only from the owner of org.freedesktop.login1, and the locked session's
/// user is asked of logind, so neither another uid's session nor another bus client can lock
/// this daemon. Runs on a thread of its own, which owns the bus connection. Without a system
/// bus it logs a notice and the daemon serves on.
public struct SessionLockWatcher: Sendable {
    let uid: uid_t
    let logger: Logger
    let lock: @Sendable (_ reason: String) -> Void

    static let login1 = "org.freedesktop.login1"
    static let managerPath = "/org/freedesktop/login1"

    public init(uid: uid_t, logger: Logger, lock: @escaping @Sendable (_ reason: String) -> Void) {
        self.uid = uid
        self.logger = logger
        self.lock = lock
    }

    /// Starts watching if `setting` (nil: the default for `uid`) asks for it.
    public static func start(_ setting: SessionEventLocking?, uid: uid_t, logger: Logger,
                             lock: @escaping @Sendable (_ reason: String) -> Void) {
        guard (setting ?? .default(forUID: uid)) == .ownSessions else {
            logger.info("session locks and suspend do not lock this daemon (lock_on_session_events = off)")
            return
        }
        let watcher = SessionLockWatcher(uid: uid, logger: logger, lock: lock)
        let thread = Thread { watcher.watch() }
        thread.name = "login1-watch"
        thread.start()
    }

    /// Subscribes, then handles signals until the bus connection is lost.
    func watch() {
        let bus: BusConnection
        do {
            bus = try BusConnection(.system)
            try bus.onSignal(sender: Self.login1, path: nil, interface: "org.freedesktop.login1.Session",
                             member: "Lock") { [unowned bus] signal in sessionLocked(signal, on: bus) }
            try bus.onSignal(sender: Self.login1, path: Self.managerPath, interface: "org.freedesktop.login1.Manager",
                             member: "PrepareForSleep") { signal in preparingForSleep(signal) }
        } catch {
            logger.notice("session locks and suspend will not lock the keychain: \(error)")
            return
        }
        logger.info("watching systemd-logind: a lock of a session of uid \(uid), or suspend, locks the keychain")
        do {
            while true {
                try bus.processPending()
                try bus.waitForMessages()
            }
        } catch {
            logger.warning("session locks and suspend no longer lock the keychain: \(error)")
        }
    }

    /// The signal names only the session's object path; its user comes from logind. If logind
    /// cannot say (the session just ended), the keychain locks: a needless lock costs a
    /// passcode, a missed one leaves secrets readable on an unattended screen.
    func sessionLocked(_ signal: BusMessage, on bus: BusConnection) {
        guard let path = signal.path else { return }
        let owner: UInt32
        do {
            let reply = try bus.call(destination: Self.login1, path: path, interface: "org.freedesktop.DBus.Properties",
                                     member: "Get", arguments: [.string("org.freedesktop.login1.Session"), .string("User")],
                                     timeoutMicroseconds: 5_000_000)
            try reply.enterContainer(.variant, signature: "(uo)")
            try reply.enterContainer(.structure, signature: "uo")
            owner = try reply.readUInt32()
        } catch {
            lock("login1: session \(path) locked, and its user is unknown (\(error))")
            return
        }
        if owner == uid {
            lock("login1: session \(path) of uid \(owner) locked")
        } else {
            logger.debug("login1: session \(path) of uid \(owner) locked: not this daemon's user, ignored")
        }
    }

    /// PrepareForSleep(true) comes before suspend or hibernation, (false) after the resume.
    func preparingForSleep(_ signal: BusMessage) {
        guard (try? signal.readBool()) == true else { return }
        lock("login1: the machine is going to sleep")
    }
}
