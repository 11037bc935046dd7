#if canImport(Glibc)
import Glibc
#endif
internal import CSystemShim
import KeychainModel

/// An eventfd that other threads signal to wake the sync thread while it waits on the database
/// (docs/sync.md §7.2: a local sync item was written, `sync now`, the daemon stops). Signals
/// before the wait are not lost: the counter stays non-zero until the waiter drains it, and any
/// number of signals wake it once.
public final class Wakeup: Sendable {
    /// Readable while a signal is pending; for poll(2).
    public let fileDescriptor: Int32

    public init() throws(KeychainError) {
        let fd = csystem_eventfd()
        guard fd >= 0 else { throw SystemCallError.current("eventfd").keychainError("cannot make the sync wake-up") }
        fileDescriptor = fd
    }

    deinit { close(fileDescriptor) }

    /// Wakes the waiter (now, or at its next wait). Safe from any thread.
    public func signal() {
        var one: UInt64 = 1
        // Only EINTR or a counter at its maximum can fail it; at the maximum it is readable anyway.
        _ = try? SystemCall.retrying("write") { write(fileDescriptor, &one, 8) }
    }

    /// Clears pending signals; true if there were any.
    @discardableResult
    public func drain() -> Bool {
        var count: UInt64 = 0
        let n = (try? SystemCall.retrying("read") { read(fileDescriptor, &count, 8) }) ?? 0
        return n == 8 && count > 0
    }
}
