#if canImport(Glibc)
import Glibc
#endif

/// A progress bar on a terminal (standard error), plain lines otherwise.
final class Progress {
    let label: String
    let terminal = isatty(2) == 1
    private var lastPercent = -1

    init(label: String) { self.label = label }

    func update(_ done: Int, _ total: Int) {
        let percent = total == 0 ? 100 : done * 100 / total
        guard percent != lastPercent else { return }
        lastPercent = percent
        if terminal {
            let filled = percent * 30 / 100
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: 30 - filled)
            Output.errorRaw("\r\(label) [\(bar)] \(percent)% (\(done)/\(total) bytes)")
        } else {
            Output.error("\(label): \(percent)% (\(done)/\(total) bytes)")
        }
    }

    func finish() {
        if terminal && lastPercent >= 0 { Output.errorRaw("\n") }
    }
}
