#if canImport(Glibc)
import Glibc
#endif

/// State reachable only inside `withLock`, as with Synchronization.Mutex (the same `sending`
/// rules keep it from escaping), on a plain pthread mutex. Swift's Mutex on Linux is a
/// priority-inheritance futex, which hands the lock straight to a sleeping waiter: with more
/// busy clients than CPUs every hand-off then waits for that waiter to be scheduled, and
/// 8 clients' gets fell from about 32k/s to 19k/s. A pthread mutex lets a running thread take
/// it meanwhile. For the locks every request takes; the rest use Mutex.
// @unchecked: the pthread mutex guards `value`, which no Swift type can express.
final class PthreadMutex<State: ~Copyable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// Behind a pointer, as in Mutex: a stored `var` would cost a dynamic exclusivity check
    /// on every access, and the lock already makes access exclusive.
    private let value: UnsafeMutablePointer<State>

    init(_ value: consuming sending State) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
        self.value = .allocate(capacity: 1)
        self.value.initialize(to: value)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result: ~Copyable, E: Error>(_ body: (inout sending State) throws(E) -> sending Result) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value.pointee)
    }
}
