import KeychainModel

/// kSecAttrAccessible by the CLI's names: the Protection cases in kebab case
/// (whenUnlockedThisDeviceOnly is when-unlocked-this-device-only).
enum Accessible {
    static let table: [(name: String, pdmn: String)] = Protection.allCases.map { (kebab("\($0)"), $0.rawValue) }
    static var names: [String] { table.map(\.name) }
    static func pdmn(named name: String) -> String? { table.first { $0.name == name }?.pdmn }
    static func name(ofPdmn pdmn: String) -> String { table.first { $0.pdmn == pdmn }?.name ?? pdmn }

    static func kebab(_ camel: String) -> String {
        var out = ""
        for c in camel {
            if c.isUppercase {
                out += "-" + c.lowercased()
            } else {
                out.append(c)
            }
        }
        return out
    }
}
