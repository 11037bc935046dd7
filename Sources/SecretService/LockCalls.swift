import DBus
import Foundation
import KeychainClient

/// Service.Lock and Unlock, and the prompts Unlock hands out (design 3.1).
extension SecretServiceBridge {
    static let promptsPerConnection = 4
    static let promptsInAll = 64
    /// Pinentry processes (and their threads) at once: a person answers one at a time.
    static let dialogsAtOnce = 4

    /// Unlocked: everything asked for, no prompt, except items that ask the person first: those
    /// come with a prompt in which keychaind asks (PresenceReads.swift). Locked: a prompt that
    /// will ask for the passcode with pinentry, or IsLocked when there is no pinentry to ask with.
    func unlock(_ objects: [String], sender: String) throws -> [BusValue] {
        guard try keychainState() != "unlocked" else {
            let asking = try itemsThatAsk(objects, sender: sender)
            guard !asking.isEmpty, promptKeychain != nil else { return [.objectPaths(objects), .objectPath("/")] }
            guard asking.count <= PresenceGrants.itemsPerPrompt else {
                throw BusErrorReply.limitsExceeded("one Unlock asks for at most \(PresenceGrants.itemsPerPrompt) items that ask first")
            }
            let asked = Set(asking.map(\.askedPath))
            let path = try newPrompt(owner: sender, objects: asking.map(\.askedPath), asking: asking)
            return [.objectPaths(objects.filter { !asked.contains($0) }), .objectPath(path)]
        }
        guard promptKeychain != nil, UnlockDialog.findPinentry(pinentry) != nil else {
            throw BusErrorReply(name: BusErrorReply.isLockedName,
                                "the keychain is locked and no pinentry program is installed: run `keychain unlock`")
        }
        return [.objectPaths([]), .objectPath(try newPrompt(owner: sender, objects: objects))]
    }

    /// The items of stored collections among `objects` that ask the person first (those the
    /// caller cannot see are left to answer as before).
    func itemsThatAsk(_ objects: [String], sender: String) throws -> [AskingItem] {
        var asking: [AskingItem] = []
        for object in objects {
            guard case .item(let collection, let id)? = try? SecretObjectPath(object, alias: { try resolveAlias($0, sender: sender) }),
                  collection != .session, let itemID = ItemID(hex: id),
                  case .properties(let values)? = try? cachedRead(.itemProperties(path: collection.itemPath(id)), sender: sender, {
                      .properties(try itemProperties(collection, id: id, sender: sender))
                  }), values["Locked"] == .bool(true) else { continue }
            asking.append(AskingItem(askedPath: object, path: collection.itemPath(id), id: itemID, service: "secret-service:" + collection.name))
        }
        return asking
    }

    /// A prompt of `owner`'s, within the limits.
    private func newPrompt(owner sender: String, objects: [String], asking: [AskingItem] = []) throws -> String {
        guard prompts.values.filter({ $0.owner == sender }).count < Self.promptsPerConnection else {
            throw BusErrorReply.limitsExceeded("this connection has \(Self.promptsPerConnection) prompts waiting already")
        }
        // Per connection alone would not bound them: a client may open many connections.
        guard prompts.count < Self.promptsInAll else {
            throw BusErrorReply.limitsExceeded("\(Self.promptsInAll) unlock prompts are waiting already")
        }
        let path = SecretObjectPath.promptPrefix + "p\(nextPrompt)"
        nextPrompt += 1
        prompts[path] = UnlockPrompt(owner: sender, caller: try caller(sender).identity, objects: objects, asking: asking)
        return path
    }

    /// Without a passcode nothing can lock. Else keychaind locks (an admin call, for the
    /// caller): the collections asked for are locked, and the items of class `ak` (their keys
    /// go after the grace period; `ck` items stay readable and are not listed).
    func lock(_ objects: [String], sender: String) throws -> [BusValue] {
        guard case .bool(true)? = try keychain.status()["passcode"] else { return [.objectPaths([]), .objectPath("/")] }
        let delegated = try delegated(sender)
        try delegated.lock()
        var locked: [String] = []
        var protections: [CollectionName: [[UInt8]: String]] = [:]
        for object in objects {
            switch try SecretObjectPath(object, alias: { try resolveAlias($0, sender: sender) }) {
            case .collection(.login)?, .collection(.created)?:
                locked.append(object)
            case .item(let collection, let id)? where collection != .session:
                if protections[collection] == nil {
                    protections[collection] = Dictionary(try stored(collection, sender).search(SecretServiceAttributes([:])).map { ($0.persistentRef, $0.protection) }) { a, _ in a }
                }
                if let itemID = ItemID(hex: id), protections[collection]?[itemID.persistentRef] == "ak" { locked.append(object) }
            default:
                break
            }
        }
        lockStateChanged()
        return [.objectPaths(locked), .objectPath("/")]
    }

    func promptCall(_ call: BusMessage, _ path: String, member: String, sender: String) throws -> [BusValue]? {
        // Another connection's prompt, or one already used, does not exist for this caller.
        guard var prompt = prompts[path], prompt.owner == sender else { throw BusErrorReply.noSuchObject(path) }
        switch member {
        case "Prompt":
            let windowID = try call.readString()
            guard !prompt.started, let promptKeychain else { throw BusErrorReply.noSuchObject(path) }
            let work: @Sendable () -> PromptOutcome
            if prompt.asking.isEmpty {
                guard let program = UnlockDialog.findPinentry(pinentry) else { throw BusErrorReply.noSuchObject(path) }
                let dialog = UnlockDialog(pinentry: program, keychain: promptKeychain.onBehalf(of: prompt.caller),
                                          windowID: windowID, description: "Unlock the keychain for \(Self.programName(prompt.caller.pid)) (pid \(prompt.caller.pid))")
                work = { PromptOutcome(path: path, dismissed: !dialog.run()) }
            } else {
                // keychaind asks, with its own pinentry on its configured display, naming the caller.
                let read = PresenceRead(keychain: promptKeychain.onBehalf(of: prompt.caller), items: prompt.asking)
                work = {
                    let granted = read.run()
                    return PromptOutcome(path: path, dismissed: granted == nil, granted: granted ?? [])
                }
            }
            guard runningDialogs < Self.dialogsAtOnce else {
                throw BusErrorReply.limitsExceeded("\(Self.dialogsAtOnce) unlock dialogs are showing already; answer one first")
            }
            runningDialogs += 1
            prompt.started = true
            prompts[path] = prompt
            let mailbox = mailbox
            Thread { mailbox.post(work()) }.start()
            return []
        case "Dismiss":
            promptCompleted(PromptOutcome(path: path, dismissed: true))
            return []
        default:
            return nil
        }
    }

    /// Sends Completed for a prompt still waiting (a dismissed one is already gone), to its
    /// owner alone: as gnome-keyring does, so clients that add no match rule (secretstorage)
    /// get it, and no other app learns of the prompt.
    func promptCompleted(_ outcome: PromptOutcome) {
        // A prompt dismissed or whose owner left meanwhile: what it read is dropped (and wiped).
        guard let prompt = prompts.removeValue(forKey: outcome.path) else { return }
        if !outcome.dismissed && prompt.asking.isEmpty && askAfterUnlocking(prompt, path: outcome.path) { return }
        if !outcome.granted.isEmpty { presenceGrants.add(outcome.granted, for: prompt.owner) }
        // Once the keychain is unlocked, a no to the items that ask first leaves the rest unlocked.
        let dismissed = outcome.dismissed && !prompt.unlockedKeychain
        let asked = Set(prompt.asking.map(\.askedPath))
        let unlocked = dismissed ? [] : outcome.dismissed ? prompt.objects.filter { !asked.contains($0) } : prompt.objects
        do {
            try bus.emitSignal(path: outcome.path, interface: Self.promptInterface, member: "Completed",
                               [.bool(dismissed), .variant(.objectPaths(unlocked))], destination: prompt.owner)
        } catch {
            BridgeLog.error("cannot send Completed for \(outcome.path): \(error)")
        }
    }

    /// After a prompt unlocked the keychain: the items that ask first among those Unlock named
    /// (which could not be told apart while it was locked) are asked for in the same prompt,
    /// keychaind asking as for an unlocked keychain's Unlock, so that one Unlock opens them
    /// (it took a second Unlock). Completed waits for that answer. False when none asks.
    private func askAfterUnlocking(_ unlocking: UnlockPrompt, path: String) -> Bool {
        lockStateChanged()
        guard let promptKeychain, let asking = try? itemsThatAsk(unlocking.objects, sender: unlocking.owner),
              !asking.isEmpty, asking.count <= PresenceGrants.itemsPerPrompt else { return false }
        var prompt = unlocking
        prompt.asking = asking
        prompt.unlockedKeychain = true
        prompts[path] = prompt
        let read = PresenceRead(keychain: promptKeychain.onBehalf(of: prompt.caller), items: asking)
        let mailbox = mailbox
        // Counted as the prompt's dialog was: the bus thread's loop counts its outcome down.
        runningDialogs += 1
        Thread {
            let granted = read.run()
            mailbox.post(PromptOutcome(path: path, dismissed: granted == nil, granted: granted ?? []))
        }.start()
        return true
    }

    /// login's Locked changed: PropertiesChanged on it and CollectionChanged on the service.
    /// `locked` nil: asked of keychaind.
    func lockStateChanged(locked known: Bool? = nil) {
        let login = CollectionName.login.path
        readCache.removeAll()
        do {
            let locked = try known ?? (keychainState() != "unlocked")
            if locked { presenceGrants.removeAll() }
            changeFeed.signalledLocked = locked
            try bus.emitSignal(path: login, interface: Self.propertiesInterface, member: "PropertiesChanged",
                               [.string(Self.collectionInterface), .variantDictionary(["Locked": .bool(locked)]), .array(element: "s", [])])
            try bus.emitSignal(path: SecretObjectPath.root, interface: Self.serviceInterface, member: "CollectionChanged", [.objectPath(login)])
        } catch {
            BridgeLog.error("cannot signal the lock state: \(error)")
        }
    }

    /// The caller's command name (/proc/PID/comm: readable for every process of the uid).
    static func programName(_ pid: Int32) -> String {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8) else { return "a program" }
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
