#if canImport(Glibc)
import Glibc
#endif
import KeychainModel

/// Runs one blocking socket exchange on a thread of its own, so that an async caller's wait for
/// keychaind (up to the connection's timeout) holds no thread of Swift's cooperative pool, which
/// has only one thread per CPU. A thread per call costs tens of microseconds: small beside a
/// round trip to the daemon, and it needs no pool to size or to shut down.
enum CallThread {
    /// `body`'s result, computed on a new thread; the awaiting task is suspended meanwhile.
    static func run<R: Sendable>(_ body: @escaping @Sendable () throws(KeychainError) -> R) async throws(KeychainError) -> R {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<R, KeychainError>, Never>) in
            let started = DetachedThread.start { continuation.resume(returning: Result(catching: body)) }
            if !started {
                continuation.resume(returning: .failure(KeychainError(.allocate, "cannot start a thread for the keychain call")))
            }
        }
        return try result.get()
    }
}
