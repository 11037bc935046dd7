import KeychainClient
import KeychainModel

/// `keychain delete`: deletes the matching items and says how many.
///
/// The daemon's delete answers no count (docs/protocol.md), so the CLI takes the persistent
/// references of the matches first and deletes each by its reference together with the
/// query's own attributes: an item changed meanwhile so that it no longer matches is kept, one
/// deleted meanwhile by someone else is not counted, and one added meanwhile is not deleted.
/// The count is then exactly the items this command removed.
enum DeleteCommand {
    static func run(_ c: Context) throws {
        try ItemSelection.require(c.arguments, allowsAll: true)
        let connection = try c.connection()
        var tally = Tally()
        for query in try c.passwordQueries() {
            try delete(query, connection, into: &tally)
        }
        guard tally.deleted > 0 || tally.uncounted else {
            throw KeychainError(.itemNotFound, "no item matches")
        }
        if c.json {
            var fields = [("status", "0"), ("deleted", String(tally.deleted))]
            if tally.uncounted { fields.append(("atLeast", "true")) }
            Output.line(JSON.object(fields))
        } else {
            Output.line(tally.summary)
        }
    }

    /// What one delete removed; `uncounted` when some matches were deleted unseen.
    struct Tally {
        var deleted = 0
        var uncounted = false

        var summary: String {
            let items = deleted == 1 ? "1 item" : "\(deleted) items"
            return uncounted
                ? "deleted at least \(items): the keychain is locked, and keychaind counts the matches of a locked class only when unlocked"
                : "deleted \(items)"
        }
    }

    static func delete(_ query: AttributeDictionary, _ connection: KeychainConnection, into tally: inout Tally) throws(KeychainError) {
        var search = query
        search["r_PersistentRef"] = .bool(true)
        search["m_Limit"] = .string("m_LimitAll")
        let result: QueryResult
        do {
            result = try connection.copyMatching(search)
        } catch where error.status == .itemNotFound {
            return
        } catch where error.status == .interactionNotAllowed {
            // Matches of a locked class cannot be listed, yet deletes work in every lock state
            // (docs/protocol.md, "Lock state"): delete them by the query, uncounted.
            do {
                try connection.delete(query)
            } catch where error.status == .itemNotFound {
                return
            }
            tally.deleted += 1
            tally.uncounted = true
            return
        }
        guard case .list(let found) = result else { throw KeychainError(.decode, "unexpected answer from keychaind") }
        for case .persistentRef(let ref) in found {
            var one = query
            one["v_PersistentRef"] = .data(ref)
            do {
                try connection.delete(one)
                tally.deleted += 1
            } catch where error.status == .itemNotFound {
                continue
            }
        }
    }
}
