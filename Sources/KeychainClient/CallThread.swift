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
            let started = start { continuation.resume(returning: Result(catching: body)) }
            if !started {
                continuation.resume(returning: .failure(KeychainError(.allocate, "cannot start a thread for the keychain call")))
            }
        }
        return try result.get()
    }

    /// The work a new thread runs, passed through pthread_create's context pointer.
    private final class Work {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Starts a detached thread running `body`; false if the system would not create one.
    private static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let context = Unmanaged.passRetained(Work(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        var thread = pthread_t()
        let status = pthread_create(&thread, &attributes, { context in
            Unmanaged<Work>.fromOpaque(context!).takeRetainedValue().body()
            return nil
        }, context)
        guard status == 0 else {
            Unmanaged<Work>.fromOpaque(context).release()
            return false
        }
        return true
    }
}
