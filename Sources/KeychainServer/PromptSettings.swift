#if canImport(Glibc)
import Glibc
#endif
import TOML

/// `[prompt]`: where keychaind asks the person at the machine (items that ask first, issue 29).
/// Only the daemon's configuration says where a dialog appears: a caller never names a display
/// or a terminal, or it could send the question to one it controls and answer it itself.
public struct PromptSettings: Sendable, Equatable {
    /// The pinentry program; nil: `pinentry` on the daemon's PATH.
    public var pinentry: String?
    /// X11's DISPLAY for a graphical pinentry (":0").
    public var display: String?
    /// WAYLAND_DISPLAY for a graphical pinentry ("wayland-0").
    public var waylandDisplay: String?
    /// The X authority file the display needs.
    public var xauthority: String?
    /// A terminal for pinentry-curses ("/dev/tty1"), which pinentry opens itself.
    public var tty: String?
    /// TERM for that terminal.
    public var term = "linux"
    /// How long an authenticated context spares its caller the prompt (`context_max_age_seconds`):
    /// Apple's longest reuse of a LocalAuthentication evaluation
    /// (LATouchIDAuthenticationMaximumAllowableReuseDuration) is 300 s.
    public var contextMaxAge = 300
    public static let contextMaxAgeRange = 1...300
    /// Whether polkit asks first (`polkit`): the caller's session's authentication agent asks
    /// for the person's login password (auth_self); pinentry, if configured, asks when polkit
    /// cannot (docs/security.md, "Asking through polkit").
    public var polkit = false
    /// How long polkit's dialog waits for the person (`polkit_timeout_seconds`).
    public var polkitTimeout = 60
    public static let polkitTimeoutRange = 5...600

    public init() {}

    /// Whether a dialog has anywhere to appear.
    public var hasPlace: Bool { display != nil || waylandDisplay != nil || tty != nil }

    mutating func apply(_ key: String, _ value: TOMLValue, line n: Int) throws(DaemonConfig.ParseError) {
        if key == "context_max_age_seconds" {
            guard case .integer(let wide) = value.kind, let seconds = Int(exactly: wide), Self.contextMaxAgeRange.contains(seconds) else {
                throw DaemonConfig.ParseError(line: n, message: "context_max_age_seconds in [prompt] must be a whole number of seconds from 1 to 300")
            }
            contextMaxAge = seconds
            return
        }
        if key == "polkit" {
            guard case .bool(let on) = value.kind else {
                throw DaemonConfig.ParseError(line: n, message: "polkit in [prompt] must be true or false")
            }
            polkit = on
            return
        }
        if key == "polkit_timeout_seconds" {
            guard case .integer(let wide) = value.kind, let seconds = Int(exactly: wide), Self.polkitTimeoutRange.contains(seconds) else {
                throw DaemonConfig.ParseError(line: n, message: "polkit_timeout_seconds in [prompt] must be a whole number of seconds from 5 to 600")
            }
            polkitTimeout = seconds
            return
        }
        guard case .string(let text) = value.kind, !text.isEmpty, !text.utf8.contains(where: { $0 < 0x20 }) else {
            throw DaemonConfig.ParseError(line: n, message: "\(key) in [prompt] must be a non-empty string without control characters")
        }
        func absolute() throws(DaemonConfig.ParseError) -> String {
            guard text.hasPrefix("/") else { throw DaemonConfig.ParseError(line: n, message: "\(key) in [prompt] must be an absolute path (\(text) is not)") }
            return text
        }
        switch key {
        case "pinentry": pinentry = try absolute()
        case "display": display = text
        case "wayland_display": waylandDisplay = text
        case "xauthority": xauthority = try absolute()
        case "tty":
            guard text.hasPrefix("/dev/") else { throw DaemonConfig.ParseError(line: n, message: "tty in [prompt] must be a terminal under /dev (\(text) is not)") }
            tty = text
        case "term": term = text
        default:
            throw DaemonConfig.ParseError(line: n, message: "unknown key \(key) in [prompt] (pinentry, display, wayland_display, xauthority, tty, term, context_max_age_seconds, polkit, polkit_timeout_seconds)")
        }
    }
}
