#if canImport(Glibc)
import Glibc
#endif
import DBus
import KeychainModel

/// Owning org.freedesktop.secrets: always letting a later `--replace` take it (as
/// gnome-keyring does), and when another owner keeps it, saying who that is.
public enum NameClaim {
    public enum Outcome: Equatable {
        case owned
        /// Someone else has it; the message names the owner, its pid and executable.
        case taken(String)
    }

    public static func claim(_ name: String, on bus: BusConnection, replace: Bool) throws(KeychainError) -> Outcome {
        switch try bus.requestName(name, replaceExisting: replace, allowReplacement: true) {
        case .acquired:
            return .owned
        case .taken:
            let what = replace ? "does not allow replacement" : "stop it or run with --replace"
            return .taken("\(name) is owned by \(describeOwner(of: name, on: bus)); \(what)")
        }
    }

    /// Who owns `name` now, described as `describeOwner` does; nil when nobody does.
    public static func currentOwner(of name: String, on bus: BusConnection) -> String? {
        let owned = try? bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                                  interface: "org.freedesktop.DBus", member: "NameHasOwner", arguments: [.string(name)]).readBool()
        return owned == true ? describeOwner(of: name, on: bus) : nil
    }

    /// ":1.7 (pid 1234, /usr/bin/gnome-keyring-daemon)", with what the bus and /proc tell.
    static func describeOwner(of name: String, on bus: BusConnection) -> String {
        func ask(_ member: String, _ argument: String) throws(KeychainError) -> BusMessage {
            try bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                         interface: "org.freedesktop.DBus", member: member, arguments: [.string(argument)])
        }
        guard let owner = try? ask("GetNameOwner", name).readString() else { return "another connection" }
        guard let pid = try? ask("GetConnectionUnixProcessID", owner).readUInt32() else { return owner }
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/\(pid)/exe", &target, target.count - 1)
        // Another uid's process, or a non-dumpable one, hides its executable: the pid still helps.
        guard n > 0 else { return "\(owner) (pid \(pid))" }
        return "\(owner) (pid \(pid), \(String(decoding: target[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)))"
    }
}
