import Foundation
import KeychainModel
import Testing

/// The bridge frees no heap block holding a secret in clear (docs/security.md, "Memory"): the
/// free() hook of SecretMemoryTests loaded into the real bridge, and the four calls that carry a
/// secret (CreateItem, GetSecret, SetSecret, GetSecrets) made with both session kinds, in login
/// and in the session collection.
@Suite("No secret left in the bridge's freed memory", .serialized)
struct SecretServiceMemoryTests {
    static let marker = "BRIDGESCAN-5d1e7b-MARKER"

    @Test(arguments: ["plain", "dh"], ["login", "session"])
    func theBridgeFreesNoBlockHoldingASecret(_ algorithm: String, _ collection: String) throws {
        var template = Array("/tmp/kcbs.XXXXXX".utf8CString)
        let scratch = String(cString: try #require(mkdtemp(&template)))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let report = scratch + "/report"
        let setup = try SecretServiceSetup(startBridge: false)
        let bridge = try setup.startedBridge(["--no-portal"], environment: [
            "LD_PRELOAD": try SecretMemoryTests.buildHook(into: scratch),
            "FREESCAN_MARKER": Self.marker,
            "FREESCAN_REPORT": report,
        ])
        let result = try setup.python("secret_memory.py", [algorithm, collection, Self.marker])
        #expect(result.status == 0, "\(result.stderr)")
        // The hook writes each hit as it happens: the bridge need not exit first.
        kill(bridge.pid, SIGKILL)
        _ = try bridge.exitStatus()
        let lines = try String(contentsOfFile: report, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("start ") }, "the hook did not load")
        let hits = lines.filter { $0.hasPrefix("hit ") }
        let check = { #expect(hits.isEmpty, "\(algorithm), \(collection): \(hits.count) freed block(s) held the secret: \(hits.prefix(5))") }
        // Still open (docs/security.md, "Memory"): a plain reply frees one block that sd-bus
        // reallocated while building the body after the secret went in. Whether a realloc
        // falls after the secret depends on the reply's size; since issue 28's op 47/48 work it
        // shows in the session collection every run and in login on some (the cause of the
        // move is not found): pinned as intermittent for plain.
        if algorithm == "plain" {
            withKnownIssue("sd-bus reallocates a plain reply's body after the secret is in it", isIntermittent: true) { check() }
        } else {
            check()
        }
    }
}
