import KeychainModel

/// kSecAttrAccessible by the CLI's names (`Protection.name`).
enum Accessible {
    static let table: [(name: String, pdmn: String)] = Protection.allCases.map { ($0.name, $0.rawValue) }
    static var names: [String] { table.map(\.name) }
    static func pdmn(named name: String) -> String? { table.first { $0.name == name }?.pdmn }
    static func name(ofPdmn pdmn: String) -> String { table.first { $0.pdmn == pdmn }?.name ?? pdmn }
}
