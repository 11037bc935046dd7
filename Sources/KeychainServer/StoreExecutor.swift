import Foundation
import KeychainModel
import KeychainProtocol
import KeychainStore

/// The one owner of the store: a dedicated thread that takes requests from every connection
/// in arrival order. Requests that queue up while it works are run as one group and their
/// writes committed together with a single fsync, so eight clients adding at once pay for one
/// durable commit instead of eight; each reply is sent only after its commit.
final class StoreExecutor: @unchecked Sendable {
    private final class Job {
        let request: Request
        let caller: Caller
        var response = Response()
        let done = DispatchSemaphore(value: 0)

        init(_ request: Request, _ caller: Caller) {
            self.request = request
            self.caller = caller
        }
    }

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var queue: [Job] = []
    private var stopping = false
    private var stopped = false

    // Touched only on the executor thread.
    private var handler: RequestHandler?
    private let finished = DispatchSemaphore(value: 0)

    init(store: ItemStore, policy: AccessPolicy) {
        handler = RequestHandler(store: store, policy: policy)
        let thread = Thread { [self] in self.run() }
        thread.name = "keychaind-store"
        thread.start()
    }

    /// Runs `request` on the store thread and waits for its response.
    func submit(_ request: Request, from caller: Caller) -> Response {
        let job = Job(request, caller)
        condition.lock()
        guard !stopping else {
            condition.unlock()
            return Response(error: KeychainError(.serviceNotAvailable, "keychaind is shutting down"))
        }
        queue.append(job)
        condition.signal()
        condition.unlock()
        job.done.wait()
        return job.response
    }

    /// Finishes every queued request, then releases the store (its keys are zeroed as the
    /// last references go). Blocks until done.
    func stop() {
        condition.lock()
        stopping = true
        condition.signal()
        condition.unlock()
        finished.wait()
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopping { condition.wait() }
            let batch = queue
            queue.removeAll(keepingCapacity: true)
            let exit = batch.isEmpty && stopping
            condition.unlock()
            if exit { break }
            process(batch)
        }
        handler = nil  // drops the store: class keys freed and zeroed
        finished.signal()
    }

    private func process(_ batch: [Job]) {
        guard let handler else { return }
        var i = 0
        while i < batch.count {
            // Admin calls change the keybag in memory: they run alone, outside any group.
            if batch[i].request.isAdministrative {
                batch[i].response = handler.handle(batch[i].request, from: batch[i].caller)
                i += 1
                continue
            }
            var j = i
            while j < batch.count && !batch[j].request.isAdministrative { j += 1 }
            let group = batch[i..<j]
            if group.count > 1 && group.contains(where: { $0.request.writesItems }) {
                runGrouped(group, handler)
            } else {
                for job in group { job.response = handler.handle(job.request, from: job.caller) }
            }
            i = j
        }
        for job in batch { job.done.signal() }
    }

    private func runGrouped(_ group: ArraySlice<Job>, _ handler: RequestHandler) {
        do throws(KeychainError) {
            try handler.store.inOneTransaction {
                for job in group { job.response = handler.handle(job.request, from: job.caller) }
            }
        } catch {
            // The commit failed: nothing in the group took effect, and every caller hears so.
            for job in group { job.response = Response(error: error) }
        }
    }
}
