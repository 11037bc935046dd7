import KeychainModel
import Testing

// The store fixture itself (TemporaryStore, TestClock, genp) is in StoreTestSupport, shared
// with KeychainSyncTests.

/// Expects `body` to throw a KeychainError with `status`.
func expectStatus(_ status: KeychainStatus, sourceLocation: SourceLocation = #_sourceLocation,
                  _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected \(status), but the call succeeded", sourceLocation: sourceLocation)
    } catch let error as KeychainError {
        #expect(error.status == status, "\(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
}
