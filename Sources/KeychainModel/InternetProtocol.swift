/// kSecAttrProtocol codes by the names people and git use ("https" is "htps"): Apple's
/// 4-character values, some with a trailing space (keychain-semantics.md 1.5).
public enum InternetProtocol {
    public static let codes: [String: String] = [
        "https": "htps", "http": "http", "ftp": "ftp ", "ftps": "ftps", "ssh": "ssh ", "smtp": "smtp",
        "imap": "imap", "imaps": "imps", "pop3": "pop3", "pop3s": "pops", "ldap": "ldap", "ldaps": "ldps",
        "smb": "smb ", "telnet": "teln", "irc": "irc ", "ircs": "ircs", "socks": "sox ",
    ]

    /// The code for a protocol name; an unknown name is kept as it is (Apple stores it as text).
    public static func code(_ name: String) -> String { codes[name.lowercased()] ?? name }

    /// The name for a code, or the code itself.
    public static func name(_ code: String) -> String { codes.first { $0.value == code }?.key ?? code }
}
