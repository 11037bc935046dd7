#if canImport(Glibc)
import Glibc
#endif

/// A detached POSIX thread running one closure: for work that blocks on a socket for a long
/// time (an async client call, an agent connection) and must hold no thread of Swift's
/// cooperative pool. Plain pthreads, because neither the CLI nor the client library links
/// Foundation's Thread.
public enum DetachedThread {
    /// The work a new thread runs, passed through pthread_create's context pointer.
    private final class Work {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }

    /// Starts a detached thread running `body`; false if the system would not create one.
    public static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
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
