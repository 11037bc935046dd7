#if canImport(Glibc)
import Glibc
#endif
import KeychainModel
import KeychainStore

// Until the socket daemon lands (issue 3) this opens the store on the default state
// directory and shows one item's full round trip, so `make run` proves the store works.
func defaultStateDirectory() -> String {
    if getuid() == 0 { return "/var/lib/keychaind" }
    if let xdg = getenv("XDG_DATA_HOME"), xdg.pointee != 0 { return String(cString: xdg) + "/keychaind" }
    let home = getenv("HOME").map { String(cString: $0) } ?? "/tmp"
    return home + "/.local/share/keychaind"
}

do {
    let directory = defaultStateDirectory()
    let store = try ItemStore(configuration: StoreConfiguration(
        stateDirectory: directory, argon2: StoreConfiguration.argon2FromEnvironment()))
    let scope = AccessScope(groups: ["keychaind.demo"])
    let item: AttributeDictionary = ["class": .string("genp"), "svce": .string("keychaind.demo"), "acct": .string("demo")]
    try? store.delete(item, scope: scope)
    try store.add(item.merging(["v_Data": .data(Array("demo secret".utf8))]) { $1 }, scope: scope)
    let found = try store.copyMatching(item.merging(["r_Attributes": .bool(true), "r_Data": .bool(true)]) { $1 }, scope: scope)
    guard case .single(.attributes(let attributes)) = found, case .data(let data)? = attributes["v_Data"] else {
        fatalError("demo item did not round-trip")
    }
    print("keychaind store at \(directory): \(try store.itemCount()) item(s), passcode \(store.hasPasscode ? "set" : "not set")")
    print("demo item: service=keychaind.demo account=demo pdmn=\(attributes["pdmn"]!) secret of \(data.count) bytes read back")
    try store.delete(item, scope: scope)
    print("the socket daemon is not built yet (issue 3); the store round trip works")
} catch {
    print("keychaind: \(error)")
    exit(1)
}
