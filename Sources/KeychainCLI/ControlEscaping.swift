/// Attribute text as `list` prints it: anyone who can add an item chooses its label, service
/// and account, so raw text could move the cursor, retitle the terminal (ESC sequences), ring
/// the bell, reverse what follows (U+202E) or forge a row with a newline. Every C0 and C1
/// control and DEL becomes `\xHH`, every bidi control `\u{XXXX}`, and a backslash `\\` so that
/// an escape in the output always means an escape in the item. The same on a terminal and a
/// pipe: what a script reads is what a person sees (docs/cli.md, "Escaping").
enum ControlEscaping {
    /// U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069.
    static func isBidiControl(_ v: UInt32) -> Bool {
        v == 0x061C || (0x200E...0x200F).contains(v) || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v)
    }

    static func escaped(_ text: String) -> String {
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            let v = scalar.value
            if v < 0x20 || (0x7F...0x9F).contains(v) {
                out += "\\x" + hex(v, digits: 2)
            } else if isBidiControl(v) {
                out += "\\u{" + hex(v, digits: 4) + "}"
            } else if scalar == "\\" {
                out += "\\\\"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    private static func hex(_ v: UInt32, digits: Int) -> String {
        let s = String(v, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, digits - s.count)) + s
    }
}
