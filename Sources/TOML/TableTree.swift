/// The tables of a document while it is read. TOML's rules on defining a table twice depend on
/// how each table came to exist, which the finished value tree does not record, so the tree is
/// built from these nodes and converted once the document is complete.
final class TableNode {
    /// How the table came to exist; decides what may still add to it.
    enum Origin {
        /// Named on the way to another table by a header (`a` in `[a.b]`): a later `[a]` may define it.
        case implicit
        /// Defined by its own `[header]` or `[[header]]`: never again.
        case header
        /// Created by a dotted key (`a.b = 1`): more dotted keys may add to it, no header may define it.
        case dotted
    }

    enum Child {
        case table(TableNode)
        case arrayOfTables(ArrayOfTables)
        case value(TOMLValue)
    }

    var origin: Origin
    let position: TOMLPosition
    let depth: Int
    private var order: [(key: String, position: TOMLPosition)] = []
    private var children: [String: Child] = [:]

    init(origin: Origin, at position: TOMLPosition, depth: Int) {
        self.origin = origin
        self.position = position
        self.depth = depth
    }

    subscript(key: String) -> Child? { children[key] }

    func add(_ key: String, at position: TOMLPosition, _ child: Child) {
        order.append((key, position))
        children[key] = child
    }

    func newTable(_ key: String, at position: TOMLPosition, origin: Origin) throws(TOMLError) -> TableNode {
        let table = try TableNode.child(of: self, origin: origin, at: position)
        add(key, at: position, .table(table))
        return table
    }

    static func child(of parent: TableNode, origin: Origin, at position: TOMLPosition) throws(TOMLError) -> TableNode {
        guard parent.depth < TOMLDecoder.maxDepth else {
            throw TOMLError("tables are nested more than \(TOMLDecoder.maxDepth) deep", at: position)
        }
        return TableNode(origin: origin, at: position, depth: parent.depth + 1)
    }

    /// `key = value` in this table, the key possibly dotted.
    func assign(_ path: [KeyPart], _ value: TOMLValue) throws(TOMLError) {
        var table = self
        for part in path.dropLast() {
            switch table[part.name] {
            case nil:
                table = try table.newTable(part.name, at: part.position, origin: .dotted)
            case .table(let existing) where existing.origin == .dotted:
                table = existing
            case .table:
                throw TOMLError("cannot add to table \(part.quoted) with a dotted key: it is defined by a [header]",
                                at: part.position)
            case .arrayOfTables:
                throw TOMLError("cannot add to array of tables \(part.quoted) with a dotted key", at: part.position)
            case .value(let v):
                throw TOMLError("\(part.quoted) is already set to \(article(v.typeName)), which cannot be extended",
                                at: part.position)
            }
        }
        let last = path[path.count - 1]
        guard table[last.name] == nil else {
            throw TOMLError("key \(last.quoted) is set twice", at: last.position)
        }
        table.add(last.name, at: last.position, .value(value))
    }

    /// The table a header's path leads to, creating the tables named on the way.
    func walk(_ path: ArraySlice<KeyPart>) throws(TOMLError) -> TableNode {
        var table = self
        for part in path {
            switch table[part.name] {
            case nil:
                table = try table.newTable(part.name, at: part.position, origin: .implicit)
            case .table(let existing):
                table = existing
            case .arrayOfTables(let array):
                table = array.tables[array.tables.count - 1]
            case .value(let v):
                throw TOMLError("\(part.quoted) is already set to \(article(v.typeName)), which cannot be extended",
                                at: part.position)
            }
        }
        return table
    }

    /// `[a.b]`: the table it defines.
    func defineTable(_ path: [KeyPart], header: TOMLPosition) throws(TOMLError) -> TableNode {
        let parent = try walk(path.dropLast())
        let last = path[path.count - 1]
        switch parent[last.name] {
        case nil:
            return try parent.newTable(last.name, at: header, origin: .header)
        case .table(let existing) where existing.origin == .implicit:
            existing.origin = .header
            return existing
        case .table(let existing) where existing.origin == .dotted:
            throw TOMLError("table [\(KeyPart.dotted(path))] is already defined by dotted keys", at: header)
        case .table:
            throw TOMLError("table [\(KeyPart.dotted(path))] is defined twice", at: header)
        case .arrayOfTables:
            throw TOMLError("[\(KeyPart.dotted(path))] is an array of tables; write [[\(KeyPart.dotted(path))]]",
                            at: header)
        case .value(let v):
            throw TOMLError("\(last.quoted) is already set to \(article(v.typeName))", at: header)
        }
    }

    /// `[[a.b]]`: the new table it appends.
    func appendTable(_ path: [KeyPart], header: TOMLPosition) throws(TOMLError) -> TableNode {
        let parent = try walk(path.dropLast())
        let last = path[path.count - 1]
        let table = try TableNode.child(of: parent, origin: .header, at: header)
        switch parent[last.name] {
        case nil:
            parent.add(last.name, at: last.position, .arrayOfTables(ArrayOfTables(table, at: header)))
        case .arrayOfTables(let array):
            array.tables.append(table)
        case .table:
            throw TOMLError("[[\(KeyPart.dotted(path))]] names a table, not an array of tables", at: header)
        case .value(let v):
            throw TOMLError("\(last.quoted) is already set to \(article(v.typeName))", at: header)
        }
        return table
    }

    var value: TOMLTable {
        var table = TOMLTable()
        for (key, position) in order {
            switch children[key]! {
            case .table(let node): table.insert(key, at: position, TOMLValue(.table(node.value), at: node.position))
            case .arrayOfTables(let array):
                let items = array.tables.map { TOMLValue(.table($0.value), at: $0.position) }
                table.insert(key, at: position, TOMLValue(.array(items), at: array.position))
            case .value(let v): table.insert(key, at: position, v)
            }
        }
        return table
    }
}

final class ArrayOfTables {
    var tables: [TableNode]
    let position: TOMLPosition

    init(_ first: TableNode, at position: TOMLPosition) {
        tables = [first]
        self.position = position
    }
}

/// One part of a possibly dotted key.
struct KeyPart {
    var name: String
    var position: TOMLPosition

    var quoted: String { KeyPart.dotted([self]) }

    /// The key as a reader would write it: bare where it can be, quoted where it must.
    static func dotted(_ parts: [KeyPart]) -> String {
        parts.map { part in
            let bare = !part.name.isEmpty && part.name.utf8.allSatisfy(isBareKeyByte)
            return bare ? part.name : "\"" + part.name + "\""
        }.joined(separator: ".")
    }
}

func isBareKeyByte(_ c: UInt8) -> Bool {
    (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39) || c == 0x5F || c == 0x2D
}

private func article(_ typeName: String) -> String {
    (typeName.first.map { "aeiou".contains($0) } ?? false ? "an " : "a ") + typeName
}
