import KeychainCrypto
import KeychainModel
import KeychainStorage

/// Exclusive access to the store for the span of one body: the daemon's store lock, or nothing
/// for a store its caller owns. A read takes it only for its SQL lookups (and, for identities,
/// the join): parsing before them, decryption and shaping after them, run without it.
public protocol StoreLookup {
    func lookup<T: Sendable>(_ body: (ItemStore) throws(KeychainError) -> T) throws(KeychainError) -> T
}

extension ItemStore: StoreLookup {
    public func lookup<T: Sendable>(_ body: (ItemStore) throws(KeychainError) -> T) throws(KeychainError) -> T { try body(self) }
}

/// Asks the person before a call reads the secret of an item that asks first (the daemon's
/// prompt). Called on the reading thread, never with the store's lock held.
public protocol PresenceCheck {
    /// Returns once the person allowed it; errSecUserCanceled, errSecAuthFailed or
    /// errSecInteractionNotAllowed otherwise.
    func confirm(label: String?, reason: String?) throws(KeychainError)
    /// `confirm`, for items of which one takes the keychain passcode alone (devicePasscode):
    /// no other way of asking counts for them.
    func confirm(label: String?, reason: String?, keychainPasscode: Bool) throws(KeychainError)
    /// Whether the person already said yes for this call without being asked now (an
    /// authenticated context it carries): then nothing asks, and Fail and Skip do not apply.
    func confirmedBefore() throws(KeychainError) -> Bool
    /// Whether the call carries an application password (an authentication context given one).
    func hasApplicationPassword() throws(KeychainError) -> Bool
    /// The secret under an item's application-password layer (`sealed`), opened with the
    /// call's password: errSecAuthFailed when it is wrong or the item's delay is on. Runs
    /// Argon2id: never called with the store's lock held.
    func openSealedSecret(_ sealed: SecretBytes, item persistentID: [UInt8]) throws(KeychainError) -> SecretBytes
}

extension PresenceCheck {
    public func confirm(label: String?, reason: String?, keychainPasscode: Bool) throws(KeychainError) {
        try confirm(label: label, reason: reason)
    }
    public func confirmedBefore() throws(KeychainError) -> Bool { false }
    public func hasApplicationPassword() throws(KeychainError) -> Bool { false }
    public func openSealedSecret(_ sealed: SecretBytes, item persistentID: [UInt8]) throws(KeychainError) -> SecretBytes {
        throw SecItems.noApplicationPassword
    }
}

/// One call's permission to read secrets of items that ask first: asked for at most once
/// per call, at the first such item.
struct ReadConsent {
    let presence: (any PresenceCheck)?
    var confirmed = false

    /// Whether the call reads the secrets of items that ask first (the first of them labelled
    /// `label`): asks the person unless they said yes already (in this call or through its
    /// context); false under u_AuthUI Skip (leave them out); errSecInteractionNotAllowed
    /// under Fail or with nobody to ask.
    /// `keychainPasscode`: one of them takes the keychain passcode alone (devicePasscode).
    mutating func permits(label: String?, query: ItemQuery, keychainPasscode: Bool = false) throws(KeychainError) -> Bool {
        if !confirmed, let presence, try presence.confirmedBefore() { confirmed = true }
        switch query.authenticationUI {
        case _ where confirmed:
            return true
        case .skip:
            return false
        case .fail:
            throw KeychainError(.interactionNotAllowed, "the item asks the person first, and the call said not to ask (u_AuthUI Fail)")
        case .allow:
            guard let presence else {
                throw KeychainError(.interactionNotAllowed, "the item asks the person first, and nobody can be asked here")
            }
            try presence.confirm(label: label, reason: query.operationPrompt, keychainPasscode: keychainPasscode)
            confirmed = true
            return true
        }
    }
}

/// A CopyMatching, parsed and planned before the lock is taken.
struct PreparedSearch: Sendable {
    let query: ItemQuery
    let plan: SearchPlan
    /// The rows were cut off by SQL LIMIT: if some of them turn out to be altered, there may be
    /// more matches beyond the cut.
    let limitedInSQL: Bool
    /// The plan's filter as SQL, built before the lock is taken.
    let selection: ItemTable.Selection
}

/// One page of an answer: its results, how many rows were altered, and where the search goes
/// on (nil: it is over).
struct SearchPage {
    let results: [ItemResult]
    /// Items that matched (there are no results when the query asks for nothing back).
    let matched: Int
    let corrupt: Int
    /// Rows that matched but had expired: like altered ones, they may have filled a SQL limit.
    var expired = 0
    let next: Int64?
}

/// SecItemCopyMatching, split around the store's lock so that a server serialising access to
/// the store holds it only for the SQL lookups. A Sendable value holding only what never
/// changes after init (the item codec with its lookup-hash key): used from any thread.
public struct SplitReader: Sendable {
    let codec: ItemCodec

    /// The one CopyMatching, of the daemon and of `ItemStore.copyMatching`. A list answer goes
    /// in pages (keyset paging by rowid, each page's rows looked up in one hold of `store`) and
    /// its results are handed to `page` as each page is shaped, so that memory per call is a
    /// page or two whatever the answer's length; the returned list then holds none of them.
    /// Any other answer is returned. Identities, which join two classes, are found in one hold.
    /// `presence` asks the person for items that ask first; without it their secrets are
    /// errSecInteractionNotAllowed.
    public func copyMatching(_ dict: AttributeDictionary, scope: AccessScope, store: some StoreLookup,
                             presence: (any PresenceCheck)? = nil,
                             page: ([ItemResult]) throws(KeychainError) -> Void) throws(KeychainError) -> QueryResult {
        let query = try ItemQuery(dict, for: .copyMatching)
        var consent = ReadConsent(presence: presence)
        let groups = try scope.groups(naming: query.accessGroup)
        if query.itemClass == .identity {
            // The join holds the lock; the person is asked for a key's bytes after it.
            var found = try store.lookup { (store) throws(KeychainError) in
                try Identities(store: store).find(query, groups: groups, limit: query.limit.maxRows)
            }
            if query.returnData, let first = found.first(where: \.key.secretAsksPerson),
               try !consent.permits(label: first.key.attributes["labl"]?.stringValue ?? first.certificate.attributes["labl"]?.stringValue, query: query,
                                    keychainPasscode: found.contains { $0.key.secretAsksPerson && AccessControl.needsKeychainPasscode($0.key.accessFlags) }) {
                found.removeAll(where: \.key.secretAsksPerson)
                guard !found.isEmpty else { throw KeychainError(.itemNotFound, "the matching identities' keys ask the person first (left out under u_AuthUI Skip)") }
            }
            // An extractable key sealed under an application password: its bytes are opened only
            // by a read of the key item itself, with the password; never its layer as the key.
            if query.returnData, found.contains(where: \.key.secretSealedUnderPassword) {
                guard query.authenticationUI == .skip else { throw SecItems.noApplicationPassword }
                found.removeAll(where: \.key.secretSealedUnderPassword)
                guard !found.isEmpty else { throw KeychainError(.itemNotFound, "the matching identities' keys are sealed under an application password (left out under u_AuthUI Skip)") }
            }
            let result = try Identities.result(found, query: query, confirmed: consent.confirmed)
            guard case .list(let results) = result else { return result }
            try page(results)
            return .list([])
        }
        if query.returnRef && query.itemClass != .genericPassword && query.itemClass != .internetPassword {
            throw KeychainError(.unimplemented, "r_Ref: object references do not cross the socket; ask for r_Data or r_Attributes")
        }
        let prepared = prepare(query, groups: groups)
        let wanted = query.limit.maxRows
        guard query.limit.returnsSingle else {
            var matched = 0
            var corrupt = 0
            var after: Int64? = 0
            while let start = after {
                let selection = pageSelection(prepared, after: start)
                let fetched = try store.lookup { (store) throws(KeychainError) in try store.rows.page(selection) }
                let found = try finish(prepared, fetched, wanted: wanted.map { $0 - matched }, consent: &consent)
                matched += found.matched
                corrupt += found.corrupt
                after = found.next
                if !found.results.isEmpty { try page(found.results) }
            }
            guard matched > 0 else { throw SecItems.nothingFound(corrupt: corrupt) }
            return .list([])
        }
        var found = try finish(prepared, try store.lookup { (store) throws(KeychainError) in try store.rows.all(prepared.selection) },
                               wanted: wanted, consent: &consent)
        if prepared.limitedInSQL && found.corrupt + found.expired > 0 && found.matched == 0 {
            // Altered or expired rows filled the SQL limit: a match may lie past it, so every row is read.
            var whole = prepared.plan.filter
            whole.limit = nil
            let selection = ItemTable.selection(whole)
            found = try finish(prepared, try store.lookup { (store) throws(KeychainError) in try store.rows.all(selection) },
                               wanted: wanted, consent: &consent)
        }
        guard found.matched > 0 else { throw SecItems.nothingFound(corrupt: found.corrupt) }
        return found.results.first.map(QueryResult.single) ?? .none
    }

    /// Plans a CopyMatching of a stored class; a search that checks nothing after decryption
    /// lets SQL stop at the limit.
    func prepare(_ query: ItemQuery, groups: [String]) -> PreparedSearch {
        var plan = SecItems.plan(query.itemClass, attributes: query.attributes, groups: groups, query: query, codec: codec)
        let limited = plan.checks.isEmpty && query.limit.maxRows != nil
        if limited { plan.filter.limit = query.limit.maxRows }
        return PreparedSearch(query: query, plan: plan, limitedInSQL: limited, selection: ItemTable.selection(plan.filter))
    }

    /// The selection of the page after `rowid` (built before taking the lock).
    func pageSelection(_ prepared: PreparedSearch, after rowid: Int64) -> ItemTable.Selection {
        var filter = prepared.plan.filter
        filter.afterRowID = rowid
        filter.limit = SealedRows.pageRows
        return ItemTable.selection(filter)
    }

    /// Opens, matches and shapes fetched rows, taking at most `wanted` matches: the one finish
    /// of a page of a list and of a single answer. An altered row is counted, not fatal.
    func finish(_ prepared: PreparedSearch, _ fetched: FetchedRows, wanted: Int?) throws(KeychainError) -> SearchPage {
        var consent = ReadConsent(presence: nil)
        return try finish(prepared, fetched, wanted: wanted, consent: &consent)
    }

    func finish(_ prepared: PreparedSearch, _ fetched: FetchedRows, wanted: Int?, consent: inout ReadConsent) throws(KeychainError) -> SearchPage {
        let query = prepared.query
        let decode = query.returnAttributes || prepared.plan.needsOpening || KeyItem.needsAttributes(query)
        let opened = try openMatches(fetched, plan: prepared.plan, withAttributes: decode, labelsOfItemsThatAsk: query.returnData, wanted: wanted)
        var items = opened.items
        let corrupt = opened.corrupt, expired = opened.expired
        if query.returnData, items.contains(where: \.secretSealedUnderPassword), try !(consent.presence?.hasApplicationPassword() ?? false) {
            // No password to open them with, and none can be asked for.
            guard query.authenticationUI == .skip else { throw SecItems.noApplicationPassword }
            items.removeAll(where: \.secretSealedUnderPassword)
        }
        if query.returnData, let first = items.first(where: \.secretAsksPerson),
           try !consent.permits(label: first.attributes["labl"]?.stringValue, query: query,
                                keychainPasscode: items.contains { $0.secretAsksPerson && AccessControl.needsKeychainPasscode($0.accessFlags) }) {
            items.removeAll(where: \.secretAsksPerson)
        }
        // After the person said yes, if the item also asks: a wrong password then costs no prompt
        // more, and no password is tried for an item the person refused.
        if query.returnData, let presence = consent.presence {
            for i in items.indices where items[i].secretSealedUnderPassword {
                items[i].data = try presence.openSealedSecret(items[i].data, item: items[i].row.persistentID)
                items[i].sealedUnderPassword = false
            }
        }
        let done = fetched.exhausted || wanted.map { items.count >= $0 } ?? false
        var results: [ItemResult] = []
        if !items.isEmpty, case .list(let shaped) = try SecItems.result(for: items, query: query, single: false, confirmed: consent.confirmed) { results = shaped }
        return SearchPage(results: results, matched: items.count, corrupt: corrupt, expired: expired, next: done ? nil : fetched.lastRowID)
    }
}

/// Fetched rows once opened: the items that match, and the rows left out as altered or expired.
struct OpenedRows {
    var items: [StoredItem] = []
    var corrupt: Int
    var expired = 0
}

extension SplitReader {
    /// Opens fetched rows and keeps those `plan` matches that had not expired at the lookup, at
    /// most `wanted`; an altered row is counted, not fatal. The step after the lookup of every
    /// read, and of a key call (KeyStore), both off the store's lock.
    func openMatches(_ fetched: FetchedRows, plan: SearchPlan, withAttributes decode: Bool,
                     labelsOfItemsThatAsk: Bool = false, wanted: Int?) throws(KeychainError) -> OpenedRows {
        var opened = OpenedRows(corrupt: fetched.corrupt)
        for (row, key) in fetched.rows {
            if let wanted, opened.items.count >= wanted { break }
            do throws(KeychainError) {
                var item = try codec.open(row, classKey: key, withAttributes: decode)
                // Its label goes in the prompt; opening its attributes also checks them
                // against the sealed constraint.
                if item.asksPerson && labelsOfItemsThatAsk && !decode { item = try codec.open(row, classKey: key, withAttributes: true) }
                if plan.matches(item) {
                    if item.isExpired(at: fetched.readAt) { opened.expired += 1 } else { opened.items.append(item) }
                }
            } catch where error.status == .decode {
                opened.corrupt += 1
            }
        }
        return opened
    }
}
