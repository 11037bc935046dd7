/// The keychaind release: what `keychain --version`, `keychaind --version` and the status
/// call report.
public enum KeychainVersion {
    public static let current = "0.1.0"
}
