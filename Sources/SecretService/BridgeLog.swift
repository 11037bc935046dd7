import Foundation
import Synchronization

/// The bridge's log: lines on standard error (journald's stream under systemd). Never a
/// secret, an attribute value or a label: paths, unique names, counts and errors only.
public enum BridgeLog {
    /// `--verbose`: also the routine lines (a connection's sessions closed as it left).
    public static let verbose = Atomic<Bool>(false)

    public static func info(_ line: String) { write(line) }
    public static func debug(_ line: String) { if verbose.load(ordering: .relaxed) { write(line) } }
    public static func error(_ line: String) { write(line) }

    private static func write(_ line: String) {
        FileHandle.standardError.write(Data("keychain-secret-service: \(line)\n".utf8))
    }
}
