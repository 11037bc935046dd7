#if canImport(Glibc)
import Glibc
#endif
import DBus
import Foundation
import KeychainClient

/// The Secret Service on one bus connection, backed by keychaind. Runs on the thread that
/// made it (sd-bus is single-threaded): `serve()` once, then `run()` until the name is lost.
public final class SecretServiceBridge {
    public static let busName = "org.freedesktop.secrets"

    static let serviceInterface = "org.freedesktop.Secret.Service"
    static let collectionInterface = "org.freedesktop.Secret.Collection"
    static let itemInterface = "org.freedesktop.Secret.Item"
    static let sessionInterface = "org.freedesktop.Secret.Session"
    static let promptInterface = "org.freedesktop.Secret.Prompt"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"

    let bus: BusConnection
    let keychain: KeychainConnection
    /// The class of new login items: "ck" (after first unlock, the default) or "ak" (when unlocked).
    let protection: String
    /// The accc flags of items created in stored collections (--require): userPresence or
    /// devicePasscode makes each ask the person before its secret is read; 0: none.
    let newItemAccessFlags: UInt32
    /// Secrets the person allowed a connection to read once (PresenceReads.swift).
    var presenceGrants = PresenceGrants()
    var sessions = SessionTable()
    var sessionItems = SessionCollection()
    var sessionLabels = SessionLabels()
    /// Who each connection is, found out at its first call and dropped when it leaves the bus.
    var callers: [String: KnownCaller] = [:]
    /// How many of `callers` hold their process's /proc directory open.
    private var heldDirectories = 0
    /// Past this many, a new connection's directory is closed after the first look and each
    /// call opens it again: a flood of connections cannot take every descriptor of the bridge
    /// (1,024 by default), which its keychaind connections and prompts need too.
    static let maxHeldDirectories = 512
    /// The connection whose call is being handled, once checked, and the executable its process
    /// ran at that check: one call looks in /proc once, not at each of its keychaind calls.
    private var checkedThisCall: (sender: String, executable: ExecutableStamp)?
    /// The login collection's Modified: the bridge's last change to it.
    var loginModified = UInt64(Date().timeIntervalSince1970)
    /// Created collections' Modified: the bridge's last change to each since it started.
    var createdModified: [ItemID: UInt64] = [:]
    /// keychaind's change notices (op 47), and what the bridge last signalled of the lock state.
    let changes: ChangeSubscription
    var changeFeed = KeychainChangeFeed()
    /// Item properties, collections and aliases read for each connection (ReadCache.swift).
    var readCache = ReadCache()
    /// The portal backend's Request objects (PortalBackend.swift).
    var portalRequests = PortalRequests()
    private var lostName = false
    /// keychaind went away. Not reconnected: keychaind reads the bridge's executable when it
    /// accepts, which a non-dumpable process hides, so the bridge exits and is started again.
    private var keychainGone: KeychainError?

    /// Unlock prompts: their own keychaind connection (their thread blocks on it), the
    /// pinentry asked for (nil: `pinentry` on PATH), the prompts not yet completed.
    let promptKeychain: KeychainConnection?
    let pinentry: String?
    var prompts: [String: UnlockPrompt] = [:]
    var nextPrompt: UInt64 = 1
    /// Pinentry dialogs running (each a thread and a process), counted until their thread
    /// posts its outcome, even when their prompt was dismissed or its owner left meanwhile.
    var runningDialogs = 0
    let mailbox: PromptMailbox

    /// `promptKeychain` nil: no unlock prompts (Unlock of a locked keychain is IsLocked).
    /// `changes`: a subscription on `keychain`'s daemon, taken before the process became
    /// non-dumpable (keychaind reads the subscriber's executable when it connects).
    /// `newItemAccessFlags`: accc flags for new items of stored collections (0: none).
    public init(bus: BusConnection, keychain: KeychainConnection, changes: ChangeSubscription, protection: String = "ck",
                newItemAccessFlags: UInt32 = 0, promptKeychain: KeychainConnection? = nil, pinentry: String? = nil) throws(KeychainError) {
        self.bus = bus
        self.keychain = keychain
        self.changes = changes
        self.protection = protection
        self.newItemAccessFlags = newItemAccessFlags
        self.promptKeychain = promptKeychain
        self.pinentry = pinentry
        mailbox = try PromptMailbox()
    }

    /// Registers the objects and the bus signals the bridge follows. Call before owning the name.
    public func serve() throws(KeychainError) {
        changeFeed.signalledLocked = try keychain.status()["state"]?.stringValue != "unlocked"
        try bus.addFallback(SecretObjectPath.root) { [unowned self] in handle($0) }
        try bus.onSignal(sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                         member: "NameOwnerChanged") { [unowned self] signal in
            guard let name = try? signal.readString(), let oldOwner = try? signal.readString(),
                  let newOwner = try? signal.readString(), name.hasPrefix(":") else { return }
            if newOwner.isEmpty {
                connectionLeft(name)
            } else if oldOwner.isEmpty {
                connectionJoined(name)
            }
        }
        try bus.onSignal(sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                         member: "NameLost") { [unowned self] signal in
            if (try? signal.readString()) == Self.busName { lostName = true }
        }
    }

    /// A broken subscription or keep-alive: keychaind stopped (the bridge exits, to be started
    /// again by the bus on the next call).
    private static func keychaindGone(_ error: KeychainError) -> KeychainError {
        error.status == .serviceNotAvailable ? KeychainError(.serviceNotAvailable, "keychaind went away: \(error.message)") : error
    }

    /// Handles calls until the name is lost (another bridge took it with --replace), and
    /// signals the changes keychaind pushes (KeychainChangeFeed.swift). Keeps its request and
    /// prompt connections alive with a status call every `keepAliveSeconds`: keychaind closes
    /// idle connections other than a subscription, and the bridge, non-dumpable by then, could
    /// not connect again as itself. Returns normally on loss; throws when the bus or keychaind
    /// goes away.
    public func run(keepAliveSeconds: Double = 240) throws(KeychainError) {
        var nextKeepAlive = Date().addingTimeInterval(keepAliveSeconds)
        while true {
            try bus.processPending()
            for outcome in mailbox.take() {
                runningDialogs -= 1
                promptCompleted(outcome)
            }
            if lostName {
                sessions.removeAll()
                return
            }
            if let keychainGone {
                sessions.removeAll()
                throw keychainGone
            }
            do throws(KeychainError) {
                if Date() >= nextKeepAlive {
                    _ = try keychain.status()
                    _ = try promptKeychain?.status()
                    nextKeepAlive = Date().addingTimeInterval(keepAliveSeconds)
                }
            } catch {
                throw Self.keychaindGone(error)
            }
            // Wait for the bus, a prompt's outcome, a change notice, the keep-alive or sd-bus's
            // own timer.
            var timeout = Int32(min(max(0, nextKeepAlive.timeIntervalSinceNow), 3600) * 1000) + 1
            if let due = bus.nextTimeout {
                var clock = timespec()
                clock_gettime(CLOCK_MONOTONIC, &clock)
                let nowMicroseconds = UInt64(clock.tv_sec) * 1_000_000 + UInt64(clock.tv_nsec / 1000)
                timeout = min(timeout, due > nowMicroseconds ? Int32(min((due - nowMicroseconds) / 1000 + 1, 3_600_000)) : 0)
            }
            var fds = [pollfd(fd: bus.fileDescriptor, events: bus.pollEvents, revents: 0),
                       pollfd(fd: mailbox.wakeRead, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: changes.fileDescriptor, events: Int16(POLLIN), revents: 0)]
            let r = poll(&fds, 3, timeout)
            guard r >= 0 || errno == EINTR else {
                throw SystemCallError.current("poll").keychainError("cannot wait for the bus")
            }
            if r > 0 && fds[2].revents != 0 {
                do throws(KeychainError) { try takeChangeNotices() } catch { throw Self.keychaindGone(error) }
            }
        }
    }

    /// A connection joined the bus: who it is and what it runs are taken now, before its first
    /// call, so that a process that execs another program after connecting is caught by the
    /// check on every call (BusCallerReader.recheck). dbus-daemon 1.14 gives no pidfd and
    /// no word of an exec: one that happens before this runs goes unseen (docs/security.md).
    func connectionJoined(_ uniqueName: String) {
        guard callers[uniqueName] == nil, (try? bus.uniqueName) != uniqueName else { return }
        if let known = try? caller(uniqueName) {
            BridgeLog.debug("\(uniqueName) joined the bus: pid \(known.identity.pid)")
        }
    }

    /// A connection left the bus: its sessions (and their keys) and what we knew of it go.
    func connectionLeft(_ uniqueName: String) {
        let closed = sessions.removeAll(of: uniqueName)
        if callers.removeValue(forKey: uniqueName)?.directory != nil { heldDirectories -= 1 }
        readCache.remove(connection: uniqueName)
        presenceGrants.remove(connection: uniqueName)
        prompts = prompts.filter { $0.value.owner != uniqueName }
        if closed > 0 { BridgeLog.debug("\(uniqueName) left the bus: closed its \(closed) session(s)") }
    }

    // MARK: Dispatch

    /// One method call to a path under /org/freedesktop/secrets. Returns false to let sd-bus
    /// answer (Introspect, unknown objects and members).
    func handle(_ call: BusMessage) -> Bool {
        guard call.isMethodCall, let sender = call.sender, let pathText = call.path,
              let interface = call.interface, let member = call.member else { return false }
        if interface == "org.freedesktop.DBus.Introspectable" || interface == "org.freedesktop.DBus.Peer" { return false }
        // CreateItem and SetSecret bring a secret; marking every call costs an erase of its buffer.
        call.markSensitive()
        checkedThisCall = nil
        defer { checkedThisCall = nil }
        do {
            try caller(sender)
            // An alias path resolves for this caller: `default` may name one of its collections.
            guard let path = try SecretObjectPath(pathText, alias: { alias in try resolveAlias(alias, sender: sender) }) else { return false }
            if let expected = Self.signatures[interface + "." + member], call.signature != expected {
                throw BusErrorReply.invalidArgs("\(interface).\(member) takes (\(expected)), not (\(call.signature))")
            }
            guard let values = try dispatch(call, path: path, pathText: pathText, interface: interface, member: member, sender: sender) else {
                return false
            }
            try bus.reply(to: call, values)
        } catch let error as BusErrorReply {
            try? bus.replyError(to: call, name: error.name, message: error.message)
        } catch let error as KeychainError {
            if error.status == .serviceNotAvailable { keychainGone = KeychainError(.serviceNotAvailable, "keychaind went away: \(error.message)") }
            if Self.isRefusalOfTheBridge(error) {
                // keychaind restarted and, on the new connection, cannot see that this
                // non-dumpable process is the bridge: only a fresh start fixes that.
                keychainGone = KeychainError(.missingEntitlement, "keychaind no longer accepts this bridge: \(error.message)")
            }
            let reply = BusErrorReply(error)
            try? bus.replyError(to: call, name: reply.name, message: reply.message)
        } catch {
            try? bus.replyError(to: call, name: BusErrorReply.failedName, message: "\(error)")
        }
        return true
    }

    /// The argument signatures of the members served (spec §14), checked before reading, so
    /// a call with the wrong arguments is InvalidArgs rather than a half-read message.
    static let signatures: [String: String] = [
        serviceInterface + ".OpenSession": "sv", serviceInterface + ".CreateCollection": "a{sv}s",
        serviceInterface + ".SearchItems": "a{ss}", serviceInterface + ".Unlock": "ao", serviceInterface + ".Lock": "ao",
        serviceInterface + ".GetSecrets": "aoo", serviceInterface + ".ReadAlias": "s", serviceInterface + ".SetAlias": "so",
        collectionInterface + ".Delete": "", collectionInterface + ".SearchItems": "a{ss}",
        collectionInterface + ".CreateItem": "a{sv}(oayays)b",
        itemInterface + ".Delete": "", itemInterface + ".GetSecret": "o", itemInterface + ".SetSecret": "(oayays)",
        sessionInterface + ".Close": "", promptInterface + ".Prompt": "s", promptInterface + ".Dismiss": "",
        propertiesInterface + ".Get": "ss", propertiesInterface + ".GetAll": "s", propertiesInterface + ".Set": "ssv",
    ]

    /// Whether keychaind refused op 16 from this bridge itself (not from one caller).
    static func isRefusalOfTheBridge(_ error: KeychainError) -> Bool {
        error.status == .missingEntitlement && error.message.hasPrefix("asCaller is for the Secret Service bridge")
    }

    /// Checks, before any client comes, that keychaind knows op 16 and takes it from this
    /// bridge: one asCaller(status) for the bridge's own process. Other refusals (this process
    /// matches no app) say nothing about clients and pass.
    public static func checkKeychaindAcceptsBridge(_ keychain: KeychainConnection) throws(KeychainError) {
        guard let me = ownIdentity() else { return }
        do {
            _ = try keychain.onBehalf(of: me).status()
        } catch where error.status == .unimplemented {
            throw KeychainError(.unimplemented, "keychaind \(((try? keychain.status())?["version"]?.stringValue) ?? "") is too old for the Secret Service: \(error.message)")
        } catch where isRefusalOfTheBridge(error) {
            throw error
        } catch {
            return
        }
    }

    /// This process as op 16 names a caller (nil when /proc/self/stat cannot be read).
    static func ownIdentity() -> CallerIdentity? {
        let directory = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { if directory >= 0 { close(directory) } }
        guard directory >= 0, let startTime = BusCallerReader.startTime(in: directory) else { return nil }
        return CallerIdentity(pid: getpid(), startTime: startTime)
    }

    /// The caller behind `sender`, identified once per connection.
    @discardableResult
    func caller(_ sender: String) throws(BusErrorReply) -> KnownCaller {
        if let known = callers[sender] {
            if checkedThisCall?.sender != sender {
                checkedThisCall = (sender, try BusCallerReader.recheck(known, uniqueName: sender))
            }
            return known
        }
        let credentials: BusCredentials
        do {
            credentials = try bus.credentials(of: sender)
        } catch {
            throw .accessDenied("the bus has no credentials for \(sender)")
        }
        let (caller, directory) = try BusCallerReader.identify(credentials, uniqueName: sender)
        let held = heldDirectories < Self.maxHeldDirectories
        if held { heldDirectories += 1 }
        let known = KnownCaller(process: caller, directory: held ? directory : nil)
        callers[sender] = known
        checkedThisCall = (sender, caller.executable)
        return known
    }

    /// `key` for `sender` from the read cache, else from `read` (keychaind), kept.
    func cachedRead(_ key: ReadCache.Key, sender: String, _ read: () throws -> ReadCache.Value) throws -> ReadCache.Value {
        // Stamped before keychaind is asked: an exec between the two then leaves an entry under
        // the old program's stamp, which the new program's next lookup drops, rather than the
        // old program's answer under the new one's stamp.
        let executable = checkedThisCall?.sender == sender ? checkedThisCall?.executable
            : callers[sender]?.executableNow
        if let value = readCache.value(key, of: sender, executable: executable) { return value }
        let value = try read()
        readCache.store(value, key, of: sender, executable: executable)
        return value
    }

    /// keychaind's calls for `sender` (op 16: decided with the caller's groups).
    func delegated(_ sender: String) throws(BusErrorReply) -> DelegatedKeychain {
        keychain.onBehalf(of: try caller(sender).identity)
    }

    func login(_ sender: String) throws(BusErrorReply) -> StoredCollection {
        try stored(.login, sender)
    }

    /// A collection kept in keychaind (login or a created one), for `sender`.
    func stored(_ collection: CollectionName, _ sender: String) throws(BusErrorReply) -> StoredCollection {
        StoredCollection(collection: collection.name, keychain: try delegated(sender), protection: protection,
                         accessFlags: newItemAccessFlags)
    }

    /// The records of the collections `sender` created (CreatedCollections.swift).
    func created(_ sender: String) throws(BusErrorReply) -> CreatedCollections {
        CreatedCollections(keychain: try delegated(sender))
    }

    /// The caller's access groups as keychaind gives them now (for the session collection).
    /// Asked at each use, not kept: keychaind judges the program the caller runs at that
    /// moment, and a process that execs another keeps its connection.
    func groups(_ sender: String) throws -> [String] {
        let text = try delegated(sender).status()["groups"]?.stringValue ?? ""
        return text.split(separator: ",").map(String.init)
    }

    /// The reply's values, or nil for a member this object does not have.
    func dispatch(_ call: BusMessage, path: SecretObjectPath, pathText: String, interface: String, member: String,
                  sender: String) throws -> [BusValue]? {
        if interface == Self.propertiesInterface {
            return try properties(call, path: path, member: member, sender: sender)
        }
        switch (path, interface, member) {
        case (.service, Self.serviceInterface, "OpenSession"):
            let algorithm = try call.readString()
            guard let input = try call.readValue().variantContents else { throw BusErrorReply.invalidArgs("OpenSession's input is not a variant") }
            let (output, sessionPath) = try sessions.open(algorithm: algorithm, input: input, owner: sender, app: try caller(sender).app)
            return [.variant(output), .objectPath(sessionPath)]
        case (.session(let sessionPath), Self.sessionInterface, "Close"):
            try sessions.close(sessionPath, of: sender)
            return []
        case (.service, Self.serviceInterface, _):
            return try serviceCall(call, member: member, sender: sender)
        case (.collection(let collection), Self.collectionInterface, _):
            return try collectionCall(call, collection, member: member, sender: sender)
        case (.item(let collection, let id), Self.itemInterface, _):
            return try itemCall(call, collection, id: id, member: member, sender: sender)
        case (.prompt(let promptPath), Self.promptInterface, _):
            return try promptCall(call, promptPath, member: member, sender: sender)
        default:
            return nil
        }
    }

    // MARK: Properties

    func properties(_ call: BusMessage, path: SecretObjectPath, member: String, sender: String) throws -> [BusValue]? {
        let interface = try call.readString()
        switch member {
        case "Get":
            let name = try call.readString()
            guard let value = try propertyValues(path: path, interface: interface, sender: sender, only: name)?[name] else {
                throw BusErrorReply.unknownProperty(interface, name)
            }
            return [.variant(value)]
        case "GetAll":
            guard let values = try propertyValues(path: path, interface: interface, sender: sender) else {
                throw BusErrorReply(name: BusErrorReply.unknownInterfaceName, "there is no interface \(interface) here")
            }
            return [.variantDictionary(values)]
        case "Set":
            let name = try call.readString()
            guard let value = try call.readValue().variantContents else { throw BusErrorReply.invalidArgs("Set's value is not a variant") }
            try setProperty(path: path, interface: interface, name: name, value: value, sender: sender)
            return []
        default:
            return nil
        }
    }

}

/// What the bridge knows of a connection: the process that opened it, as first seen.
struct KnownCaller {
    let process: BusCaller
    /// Its /proc/PID directory, held until the connection leaves the bus (nil past
    /// `SecretServiceBridge.maxHeldDirectories`).
    let directory: ProcessDirectory?

    /// The executable its process runs now; nil once it has exited (or while it hides it).
    /// One `fstatat` through the held directory; without one, /proc/PID is opened again and
    /// must show the start time first seen (the pid may name a later process by now).
    var executableNow: ExecutableStamp? {
        if let directory { return directory.executable }
        guard let reopened = ProcessDirectory(pid: process.pid), reopened.startTime == process.startTime else { return nil }
        return reopened.executable
    }

    var identity: CallerIdentity { CallerIdentity(pid: process.pid, startTime: process.startTime) }
    /// Whose share of sessions and of the session collection its use counts against.
    var app: ExecutableStamp { process.executable }
}
