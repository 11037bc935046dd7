#if canImport(Glibc)
import Glibc
#endif

/// A uid's account as the system's user database (NSS) names it, for messages and prompts.
public enum UserAccount {
    /// The user name of `uid`; nil when it has none.
    public static func name(of uid: UInt32) -> String? {
        var pw = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &pw, &buffer, buffer.count, &result) == 0, result != nil, let name = pw.pw_name else { return nil }
        return String(cString: name)
    }

    /// "uid 1001 (alice)", or "uid 1001" when it has no name.
    public static func describe(_ uid: UInt32) -> String {
        name(of: uid).map { "uid \(uid) (\($0))" } ?? "uid \(uid)"
    }
}
