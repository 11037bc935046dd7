#if canImport(Glibc)
import Glibc
#endif
import DBus
import KeychainClient
import KeychainModel

/// What an import did (or, in a dry run, would do), counted, with the reason for every item
/// not imported. Labels and paths only: never a secret or an attribute value.
public struct ImportSummary: Sendable {
    public var added = 0
    public var updated = 0
    public var skipped: [(what: String, why: String)] = []
    public var failed: [(what: String, why: String)] = []
    /// One line per item written (or, in a dry run, to be written).
    public var written: [String] = []
    public let dryRun: Bool

    public var imported: Int { added + updated }

    /// The summary a person reads: counts first, then what was not imported and why.
    public var report: String {
        let verb = dryRun ? "would import" : "imported"
        var lines = dryRun ? written : []
        lines.append("\(verb) \(imported) (\(added) new, \(updated) updated), skipped \(skipped.count), failed \(failed.count)")
        lines += skipped.map { "skipped \($0.what): \($0.why)" }
        lines += failed.map { "failed \($0.what): \($0.why)" }
        return lines.joined(separator: "\n")
    }
}

/// Writes what a provider holds (ProviderReader) into keychaind, idempotently: an item already
/// there with the same attributes, label, content type and secret is skipped; one whose label,
/// content type or secret changed at the provider is replaced; everything else is added with
/// the provider's Created and Modified. The provider's login collection goes to login; each
/// other collection to a created collection whose record names the provider's path
/// (`import:source`), made on the first run and found again on the next. Every call is made
/// for this process itself (op 16), so keychaind puts the items in the groups it gives the
/// bridge's executable, as for a client that stored them through the bridge.
public struct SecretServiceImport {
    static let sourceAttribute = "import:source"

    let keychain: DelegatedKeychain
    let protection: String
    let dryRun: Bool

    public init(keychain: KeychainConnection, protection: String, dryRun: Bool) throws(KeychainError) {
        guard let me = SecretServiceBridge.ownIdentity() else {
            throw KeychainError(.io, "cannot read this process's start time from /proc/self/stat")
        }
        self.keychain = keychain.onBehalf(of: me)
        self.protection = protection
        self.dryRun = dryRun
    }

    /// Reads the provider on `bus` and writes what it holds.
    public func run(bus: BusConnection) throws(KeychainError) -> ImportSummary {
        let collections = try ProviderReader(bus: bus).read()
        var summary = ImportSummary(dryRun: dryRun)
        var records = try CreatedCollections(keychain: keychain).all().created
        for collection in collections {
            let what = "collection \(collection.path) (\"\(collection.label)\")"
            if let failure = collection.failure {
                summary.failed.append((what, failure))
                continue
            }
            for (path, reason) in collection.unreadable { summary.failed.append(("item \(path)", reason)) }
            do throws(KeychainError) {
                guard let target = try target(of: collection, records: &records) else {
                    // A dry run of a collection not imported before: all of it would be new.
                    for item in collection.items { note(.added, item, into: &summary, collection: collection.label) }
                    continue
                }
                try write(collection.items, to: target, summary: &summary, collection: collection.label)
            } catch {
                summary.failed.append((what, error.message))
            }
        }
        return summary
    }

    /// The collection in keychaind that `collection` goes to: nil in a dry run when it does
    /// not exist yet.
    private func target(of collection: ProviderCollection, records: inout [CollectionRecord]) throws(KeychainError) -> StoredCollection? {
        if collection.path.hasSuffix("/collection/login") {
            return StoredCollection(collection: CollectionName.login.name, keychain: keychain, protection: protection)
        }
        let created = CreatedCollections(keychain: keychain)
        if let record = records.first(where: { $0.attributes[Self.sourceAttribute] == collection.path }) {
            if record.label != collection.label && !dryRun { try created.setLabel(record, collection.label) }
            return StoredCollection(collection: CollectionName.created(record.id).name, keychain: keychain, protection: protection)
        }
        guard !dryRun else { return nil }
        let id = try created.create(label: collection.label, alias: "", extraAttributes: [Self.sourceAttribute: collection.path])
        records = try created.all().created
        return StoredCollection(collection: CollectionName.created(id).name, keychain: keychain, protection: protection)
    }

    private enum Outcome { case added, updated }

    /// An item of keychaind that a provider item may pair with.
    private struct StoredCopy {
        let ref: [UInt8]
        let attributes: AttributeDictionary
    }

    /// Each provider item pairs with at most one item of the target collection, and each of
    /// those with at most one provider item: first an item holding the same attribute set,
    /// label, content type and secret (skipped, unchanged); then the item an earlier import
    /// took from the same provider path (`gena`), whatever its attributes now, so that an
    /// attribute changed at the provider (gnome-keyring adds `xdg:schema` to items it reloads
    /// from disk) updates the copy instead of adding a second one; then any other item of the
    /// same attribute set (the provider may hold several with one set, a CreateItem without
    /// replace). A provider item that pairs with nothing is added.
    private func write(_ items: [ProviderItem], to target: StoredCollection, summary: inout ImportSummary,
                       collection: String) throws(KeychainError) {
        var groups: [SecretServiceAttributes: [ProviderItem]] = [:]
        var order: [SecretServiceAttributes] = []
        for item in items {
            do throws(KeychainError) {
                let pairs = try SecretServiceAttributes(item.attributes)
                if groups[pairs] == nil { order.append(pairs) }
                groups[pairs, default: []].append(item)
            } catch {
                summary.failed.append(("item \(item.path) (\"\(item.label)\")", "its attributes cannot be kept: \(error.message)"))
            }
        }
        var claimed: Set<[UInt8]> = []
        var sameSet: [SecretServiceAttributes: [StoredCopy]] = [:]
        var unmatched: [(item: ProviderItem, pairs: SecretServiceAttributes)] = []
        for pairs in order {
            var existing: [StoredCopy] = []
            for row in try target.search(pairs, exact: true) {
                guard let id = ItemID(persistentRef: row.persistentRef) else { continue }
                existing.append(StoredCopy(ref: row.persistentRef, attributes: try target.item(id, secret: true)))
            }
            for item in groups[pairs]! {
                if let copy = existing.first(where: { !claimed.contains($0.ref) && Self.holdsTheSame($0.attributes, as: item) }) {
                    claimed.insert(copy.ref)
                    summary.skipped.append(("item \(item.path) (\"\(item.label)\")", "already in keychaind, unchanged"))
                } else {
                    unmatched.append((item, pairs))
                }
            }
            sameSet[pairs] = existing
        }
        guard !unmatched.isEmpty else { return }
        let earlier = try earlierImports(in: target)
        var stale: [[UInt8]?] = unmatched.map { entry in
            guard let ref = earlier[entry.item.path], !claimed.contains(ref) else { return nil }
            claimed.insert(ref)
            return ref
        }
        for (index, entry) in unmatched.enumerated() where stale[index] == nil {
            if let copy = sameSet[entry.pairs]?.first(where: { !claimed.contains($0.ref) }) {
                claimed.insert(copy.ref)
                stale[index] = copy.ref
            }
        }
        for (index, entry) in unmatched.enumerated() {
            let item = entry.item
            do throws(KeychainError) {
                if !dryRun {
                    // Added before the stale one goes, so that a failure loses nothing.
                    try add(item, pairs: entry.pairs, to: target)
                    if let ref = stale[index] { try keychain.delete(["v_PersistentRef": .data(ref)]) }
                }
                note(stale[index] == nil ? .added : .updated, item, into: &summary, collection: collection)
            } catch {
                summary.failed.append(("item \(item.path) (\"\(item.label)\")", error.message))
            }
        }
    }

    /// The items of `target` an earlier import wrote, by the provider path each came from
    /// (their `gena`); the oldest where two name one path.
    private func earlierImports(in target: StoredCollection) throws(KeychainError) -> [String: [UInt8]] {
        let result: QueryResult
        do {
            result = try keychain.copyMatching([
                "class": .string("genp"), "svce": .string(target.service), "r_Attributes": .bool(true),
                "r_PersistentRef": .bool(true), "m_Limit": .string("m_LimitAll"),
            ])
        } catch where error.status == .itemNotFound {
            return [:]
        }
        guard case .list(let rows) = result else { return [:] }
        var found: [String: [UInt8]] = [:]
        for case .attributes(let attributes) in rows {
            guard case .data(let source)? = attributes["gena"], case .data(let ref)? = attributes["v_PersistentRef"],
                  let path = String(validating: Array(source), as: UTF8.self) else { continue }
            if found[path] == nil { found[path] = Array(ref) }
        }
        return found
    }

    private func add(_ item: ProviderItem, pairs: SecretServiceAttributes, to target: StoredCollection) throws(KeychainError) {
        var attributes: AttributeDictionary = [
            "class": .string("genp"), "svce": .string(target.service), "xsat": .data(pairs.encoded),
            "labl": .string(item.label), "xsct": .string(item.contentType), "v_Data": .data(item.secret),
            "pdmn": .string(protection), "gena": .data(SecretBytes(Array(item.path.utf8))),
        ]
        if item.created > 0 { attributes["cdat"] = .date(Double(item.created) - absoluteTimeIntervalSince1970) }
        if item.modified > 0 { attributes["mdat"] = .date(Double(item.modified) - absoluteTimeIntervalSince1970) }
        _ = try keychain.attributeAdd(attributes, replace: false)
    }

    private static func holdsTheSame(_ stored: AttributeDictionary, as item: ProviderItem) -> Bool {
        (stored["labl"]?.stringValue ?? "") == item.label && (stored["xsct"]?.stringValue ?? "") == item.contentType
            && (stored["v_Data"] ?? .data(.empty)) == .data(item.secret)
    }

    private func note(_ outcome: Outcome, _ item: ProviderItem, into summary: inout ImportSummary, collection: String) {
        switch outcome {
        case .added: summary.added += 1
        case .updated: summary.updated += 1
        }
        let verb = outcome == .added ? "add" : "update"
        summary.written.append("\(verb) \"\(item.label)\" (\(item.attributes.count) attributes) into \"\(collection)\"")
    }
}
