import KeychainModel
import KeychainProtocol
import Synchronization

/// How a cancelled task stops the one call it is waiting for: cancelling shuts down the socket
/// the call is using, which wakes its blocked read at once, and makes the call end with
/// errSecUserCanceled instead of reconnecting. Closing is left to the call's own thread, so the
/// descriptor cannot be reused by another open while this one still names it.
final class CallInterrupt: Sendable {
    private struct State {
        var cancelled = false
        /// The socket the call is writing to or reading from right now.
        var socket: UnixSocket?
    }

    private let state = Mutex(State())

    static let canceled = KeychainError(.userCanceled, "the call was cancelled; a write may or may not have been carried out")

    func cancel() {
        state.withLock { state in
            state.cancelled = true
            state.socket?.shutdownBoth()
        }
    }

    var isCancelled: Bool { state.withLock { $0.cancelled } }

    /// From here until `end()`, a cancel shuts `socket` down. Throws if the call is cancelled already.
    func begin(_ socket: UnixSocket) throws(KeychainError) {
        try state.withLock { (state) throws(KeychainError) in
            guard !state.cancelled else { throw Self.canceled }
            state.socket = socket
        }
    }

    func end() {
        state.withLock { $0.socket = nil }
    }
}
