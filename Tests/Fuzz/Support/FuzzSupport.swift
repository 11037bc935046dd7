// Shared by every fuzz target: how a target writes its seed corpus, and how it fails a check.
#if canImport(Glibc)
import Glibc
#endif

/// A named input a target starts from: a valid encoding, or a near miss of one.
struct Seed {
    let name: String
    let bytes: [UInt8]

    init(_ name: String, _ bytes: [UInt8]) {
        self.name = name
        self.bytes = bytes
    }

    init(_ name: String, text: String) {
        self.init(name, Array(text.utf8))
    }
}

/// With FUZZ_WRITE_SEEDS=<dir> in the environment, writes `seeds` there, one file each, and
/// exits: how scripts/fuzz-seeds regenerates Tests/Fuzz/<target>/corpus from the encoders
/// themselves, so the seeds follow the formats when they change.
func writeSeedsIfAsked(_ seeds: () -> [Seed]) {
    guard let dir = getenv("FUZZ_WRITE_SEEDS").map({ String(cString: $0) }) else { return }
    for seed in seeds() {
        let path = dir + "/" + seed.name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else {
            perror(path)
            exit(1)
        }
        let written = seed.bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == seed.bytes.count, close(fd) == 0 else {
            perror(path)
            exit(1)
        }
    }
    exit(0)
}

/// Stops the target with `message` when a property it checks does not hold: precondition
/// drops its message in the -O builds the targets are, fatalError keeps it.
func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError(message()) }
}
