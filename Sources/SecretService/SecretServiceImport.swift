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

    /// Items are matched by attribute set: the provider may hold several with one set (a
    /// CreateItem without replace), so each of them pairs with an item of that set already in
    /// keychaind that holds the same label, content type and secret, else replaces one that
    /// pairs with nothing, else is added.
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
        for pairs in order {
            var existing: [(ref: [UInt8], attributes: AttributeDictionary)] = []
            for row in try target.search(pairs, exact: true) {
                guard let id = ItemID(persistentRef: row.persistentRef) else { continue }
                existing.append((row.persistentRef, try target.item(id, secret: true)))
            }
            var unmatched: [ProviderItem] = []
            for item in groups[pairs]! {
                if let index = existing.firstIndex(where: { Self.holdsTheSame($0.attributes, as: item) }) {
                    existing.remove(at: index)
                    summary.skipped.append(("item \(item.path) (\"\(item.label)\")", "already in keychaind, unchanged"))
                } else {
                    unmatched.append(item)
                }
            }
            for item in unmatched {
                let stale = existing.isEmpty ? nil : existing.removeFirst()
                do throws(KeychainError) {
                    if !dryRun {
                        // Added before the stale one goes, so that a failure loses nothing.
                        try add(item, pairs: pairs, to: target)
                        if let stale { try keychain.delete(["v_PersistentRef": .data(stale.ref)]) }
                    }
                    note(stale == nil ? .added : .updated, item, into: &summary, collection: collection)
                } catch {
                    summary.failed.append(("item \(item.path) (\"\(item.label)\")", error.message))
                }
            }
        }
    }

    private func add(_ item: ProviderItem, pairs: SecretServiceAttributes, to target: StoredCollection) throws(KeychainError) {
        var attributes: AttributeDictionary = [
            "class": .string("genp"), "svce": .string(target.service), "xsat": .data(pairs.encoded),
            "labl": .string(item.label), "xsct": .string(item.contentType), "v_Data": .data(item.secret),
            "pdmn": .string(protection),
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
