#if canImport(Glibc)
import Glibc
#endif
import KeychainClient
import KeychainModel

/// `keychain sync status|create|join|approve|remove|leave|devices|now` (docs/sync.md, 7.4):
/// membership of a sync circle, and its sync thread, through keychaind, which alone talks to
/// the database.
enum SyncCommands {
    static let nameOption: [(name: String, help: String)] = [
        ("name", "This device's name as other members see it (at most 64 bytes; default: the host name)."),
    ]

    static let commands: [Command] = [
        Command(spec: CommandSpec(name: "sync status", summary: "Show this device's sync state, the circle's and its own fingerprints, epoch, members and the sync thread's progress.",
                                  options: globalOptions, flags: jsonFlag)) { c in
            let s = try c.connection().syncStatus()
            var info: AttributeDictionary = ["state": .string(s.state), "epoch": .int(Int64(s.epoch)),
                                             "members": .int(Int64(s.members)), "outbox": .int(Int64(s.outbox))]
            if let circle = s.circleFingerprint { info["circle"] = .string(circle) }
            if let device = s.deviceFingerprint { info["device"] = .string(device) }
            if let error = s.lastError { info["last_error"] = .string(error) }
            info["loop"] = .string(s.loop)
            info["inbox"] = .int(Int64(s.inbox))
            info["pushed"] = .int(Int64(s.pushed))
            info["pulled"] = .int(Int64(s.pulled))
            info["applied"] = .int(Int64(s.applied))
            info["rejected"] = .int(Int64(s.rejected))
            info["rollbacks_healed"] = .int(Int64(s.rollbacksHealed))
            info["heads_rejected"] = .int(Int64(s.headsRejected))
            if let why = s.lastRollback { info["last_rollback"] = .string(why) }
            if let last = s.lastPass { info["last_pass"] = .int(last) }
            if c.json {
                Output.line(JSON.attributes(info))
                return
            }
            Output.line("state: \(s.state)")
            if let circle = s.circleFingerprint { Output.line("circle: \(grouped(circle))") }
            if let device = s.deviceFingerprint { Output.line("device: \(grouped(device))") }
            Output.line("epoch: \(s.epoch)")
            Output.line("members: \(s.members)")
            Output.line("outbox: \(s.outbox)")
            Output.line("sync: \(s.loop)")
            if let last = s.lastPass { Output.line("last pass: \(dateText(last))") }
            Output.line("inbox: \(s.inbox)")
            Output.line("pushed: \(s.pushed), pulled: \(s.pulled), applied: \(s.applied), rejected: \(s.rejected)")
            Output.line("rollbacks healed: \(s.rollbacksHealed), heads rejected: \(s.headsRejected)")
            if let why = s.lastRollback { Output.line("last rollback: \(why)") }
            if let error = s.lastError { Output.line("last error: \(error)") }
        },
        Command(spec: CommandSpec(name: "sync create", summary: "Found a sync circle in the configured database and print its fingerprint (admin).",
                                  options: globalOptions + nameOption, flags: jsonFlag)) { c in
            let made = try c.connection().syncCreate(name: try name(c))
            if c.json {
                Output.line(JSON.attributes(["circle": .string(made.circle), "device": .string(made.device)]))
                return
            }
            Output.line("circle: \(grouped(made.circle))")
            Output.error("type these digits on a device to join it: keychain sync join --circle '\(grouped(made.circle))'")
        },
        Command(spec: CommandSpec(name: "sync join", summary: "Ask to join the circle with these 32 digits; prints this device's fingerprint for a member to approve (admin).",
                                  options: globalOptions + nameOption + [("circle", "The circle's fingerprint, from `keychain sync status` on a member.")],
                                  flags: jsonFlag)) { c in
            guard let circle = c.arguments["circle"] else { throw UsageError(message: "sync join needs --circle DIGITS") }
            let joined = try c.connection().syncJoin(circle: circle, name: try name(c))
            if c.json {
                Output.line(JSON.attributes(["circle": .string(joined.circle), "device": .string(joined.device)]))
                return
            }
            Output.line("device: \(grouped(joined.device))")
            Output.error("on a member, approve this device with: keychain sync approve '\(grouped(joined.device))'")
        },
        Command(spec: CommandSpec(name: "sync approve", summary: "Approve the waiting device with these 32 digits, read from its screen (admin).",
                                  options: globalOptions, flags: jsonFlag, positional: "DIGITS")) { c in
            guard let digits = c.arguments["DIGITS"] else { throw UsageError(message: "sync approve needs the device's DIGITS") }
            let device = try c.connection().syncApprove(device: digits)
            if c.json {
                Output.line(JSON.attributes(attributes(device)))
                return
            }
            Output.line("approved: \(grouped(device.fingerprint)) \(ControlEscaping.escaped(device.name))")
        },
        Command(spec: CommandSpec(name: "sync remove", summary: "Remove the member with these 32 digits and rotate the circle key; it reads nothing written after (admin).",
                                  options: globalOptions, flags: jsonFlag, positional: "DIGITS")) { c in
            guard let digits = c.arguments["DIGITS"] else { throw UsageError(message: "sync remove needs the member's DIGITS (`keychain sync devices`)") }
            let removed = try c.connection().syncRemove(device: digits)
            if c.json {
                Output.line(JSON.attributes(["device": .string(removed.device), "epoch": .int(Int64(removed.epoch)),
                                             "resealed": .int(Int64(removed.resealed)), "dropped": .int(Int64(removed.dropped))]))
                return
            }
            Output.line("removed: \(grouped(removed.device))")
            Output.line("epoch: \(removed.epoch) (\(removed.resealed) records re-sealed, \(removed.dropped) dropped)")
        },
        Command(spec: CommandSpec(name: "sync leave", summary: "Leave the sync circle; this device keeps its items, and a member rotates the key (admin).",
                                  options: globalOptions, flags: [])) { c in
            try c.connection().syncLeave()
            Output.error("left the circle; the items synced so far stay in this keychain")
        },
        Command(spec: CommandSpec(name: "sync devices", summary: "List the circle's members and the devices waiting to join.",
                                  options: globalOptions, flags: jsonFlag)) { c in
            let devices = try c.connection().syncDevices()
            if c.json {
                Output.line(JSON.array(devices.map(attributes)))
                return
            }
            for d in devices {
                // Each device names itself: its name is escaped as list escapes an attribute.
                Output.line("\(d.isMember ? "member " : "pending") \(grouped(d.fingerprint))  \(ControlEscaping.escaped(d.name))")
            }
        },
        Command(spec: CommandSpec(name: "sync now", summary: "Push and pull now; returns once this device has caught up with the circle.",
                                  options: globalOptions, flags: [])) { c in
            try c.connection().syncNow()
            Output.line("caught up")
        },
    ]

    /// Ms since 2001 as UTC, to the second.
    static func dateText(_ ms: Int64) -> String {
        var t = time_t(ms / 1000 + 978_307_200)
        var parts = tm()
        gmtime_r(&t, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%SZ", &parts)
        return String(decoding: buffer.prefix(n).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func attributes(_ d: SyncDevice) -> AttributeDictionary {
        ["id": .string(d.id), "fingerprint": .string(d.fingerprint), "name": .string(d.name), "member": .bool(d.isMember)]
    }

    /// --name, else the host name (cut to the 64 bytes a name may have, at a character boundary).
    static func name(_ c: Context) throws -> String {
        if let given = c.arguments["name"] {
            guard given.utf8.count <= 64 else { throw UsageError(message: "--name is at most 64 bytes") }
            return given
        }
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        var host = String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        while host.utf8.count > 64 { host.removeLast() }
        return host
    }

    /// 32 digits as eight groups of four, as people compare them.
    static func grouped(_ digits: String) -> String {
        var groups: [Substring] = []
        var rest = Substring(digits)
        while !rest.isEmpty {
            groups.append(rest.prefix(4))
            rest = rest.dropFirst(4)
        }
        return groups.joined(separator: " ")
    }
}
