#if canImport(Glibc)
import Glibc
#endif
internal import CLibPQ
import KeychainModel
import Synchronization

/// One connection to PostgreSQL through libpq: the only code that calls libpq (docs/sync.md §10).
///
/// Blocking, for the one sync thread that owns it (libpq allows one thread per connection at a
/// time; the type is deliberately not Sendable). Every statement goes out with binary parameters
/// and comes back in binary, and its result is copied into Swift values before the call returns.
/// Every wait is bounded: a statement by `statementTimeout` (then cancelled on the server), a
/// wait for notifications by its own timeout or the `Wakeup`.
///
/// Once the connection breaks (`PostgresFailure.Kind.connectionLost`, or a timeout whose cancel
/// went unanswered) it stays closed and every call fails the same way: the caller makes a new
/// one and LISTENs again (§7.2), since a new session has no LISTENs and may have missed
/// notifications.
///
/// Messages never contain the connection string nor the password in it: libpq's own messages are
/// scrubbed of the password, and a connection string libpq cannot parse is not quoted at all.
public final class PostgresConnection {
    private var handle: OpaquePointer?
    /// The password from the connection string, only to strip it from libpq's messages.
    private let passwordToRedact: [UInt8]?
    /// How long a statement may run before it is cancelled. The sync loop's statements take
    /// milliseconds (§12.2); a stalled server or a half-open TCP connection must not hold the
    /// sync thread for ever.
    public var statementTimeout: Duration = .seconds(30)
    /// How long to wait for the server to act on a cancel before giving the connection up.
    static let cancelGrace: Duration = .seconds(5)
    /// The oldest server the schema of §7.1 was written for.
    static let oldestServerVersion: Int32 = 130000

    /// Connects with a libpq connection string (`host=... dbname=...` or a `postgresql://` URI).
    /// TLS (`sslmode`, `sslrootcert`, client certificates), the password file (`passfile`) and
    /// the PG* environment variables are libpq's. Waits for at most `connect_timeout` seconds
    /// per host (10 unless the string says otherwise).
    public convenience init(_ connectionString: String) throws(KeychainError) {
        try self.init(connectionString, stop: nil)
    }

    /// Connects as `init(_:)` does; a connect still waiting on the server when `stop` is
    /// signalled is given up at once (errSecNotAvailable): how a daemon whose database host
    /// does not answer still stops within its bound. `stop` is only watched, never drained.
    public init(_ connectionString: String, stop: Wakeup?) throws(KeychainError) {
        var parseError: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &parseError) else {
            // libpq's message quotes the offending part of the string, which may be the password.
            if let parseError { PQfreemem(parseError) }
            throw KeychainError(.param, "the PostgreSQL connection string is not valid (libpq conninfo or postgresql:// URI); it is not repeated here, as it may hold a password",
                                underlying: PostgresFailure(.badConnectionString))
        }
        passwordToRedact = Self.password(in: options)
        let hosts = Self.hostAttempts(Self.values(in: options, ["host", "hostaddr", "port"]))
        PQconninfoFree(options)

        // Keywords before "dbname" are defaults that the string overrides; those after it win.
        let settings: [(String, String)] = [
            ("connect_timeout", "10"),
            ("fallback_application_name", "keychaind"),
            ("dbname", connectionString),
            // Text in results is read as UTF-8 (binary text is in the client encoding).
            ("client_encoding", "UTF8"),
        ]
        var failure = KeychainError(.notAvailable, "cannot connect to PostgreSQL", underlying: PostgresFailure(.connect))
        attempts: for host in hosts {
            switch connect(settings + host, stop: stop) {
            case .connected(let conn):
                handle = conn
                break attempts
            case .failed(let error):
                failure = error
            case .stopped:
                failure = KeychainError(.notAvailable, "the connect to PostgreSQL was given up: asked to stop", underlying: PostgresFailure(.connect))
                break attempts
            }
        }
        guard let conn = handle else { throw failure }
        // Notices ("relation already exists, skipping") would otherwise go to stderr; nothing
        // the sync loop does depends on them.
        PQsetNoticeProcessor(conn, { _, _ in }, nil)
        let version = PQserverVersion(conn)
        guard version >= Self.oldestServerVersion else {
            close()
            throw KeychainError(.notAvailable, "the server runs PostgreSQL \(version / 10000); sync needs 13 or later",
                                underlying: PostgresFailure(.connect))
        }
    }

    private enum Attempt {
        case connected(OpaquePointer)
        case failed(KeychainError)
        /// `stop` was signalled first.
        case stopped
    }

    /// One connect, driven by PQconnectPoll so that the wait watches `stop` too. libpq leaves
    /// `connect_timeout` to the caller of a non-blocking connect: it bounds the whole attempt
    /// here.
    private func connect(_ settings: [(String, String)], stop: Wakeup?) -> Attempt {
        let started = Self.withCStrings(settings.map(\.0)) { keywords in
            Self.withCStrings(settings.map(\.1)) { values in
                PQconnectStartParams(keywords, values, 1)
            }
        }
        guard let conn = started else {
            return .failed(KeychainError(.notAvailable, "cannot connect to PostgreSQL: out of memory", underlying: PostgresFailure(.connect)))
        }
        let limit = Self.connectTimeout(of: conn)
        let deadline = ContinuousClock.now + (limit ?? .seconds(86_400))
        // As libpq's own blocking connect does: wait for writing first, then as each step asks.
        var step = PGRES_POLLING_WRITING
        while PQstatus(conn) != CONNECTION_BAD, step != PGRES_POLLING_FAILED {
            if step == PGRES_POLLING_OK { return .connected(conn) }
            // The socket may change from one address or host to the next.
            var fds = [pollfd(fd: PQsocket(conn), events: Int16(step == PGRES_POLLING_READING ? POLLIN : POLLOUT), revents: 0)]
            if let stop { fds.append(pollfd(fd: stop.fileDescriptor, events: Int16(POLLIN), revents: 0)) }
            let ready: Int32
            do throws(KeychainError) {
                ready = try Self.poll(&fds, until: deadline)
            } catch {
                PQfinish(conn)
                return .failed(KeychainError(error.status, error.message, underlying: PostgresFailure(.connect)))
            }
            if fds.count > 1, fds[1].revents != 0 {
                PQfinish(conn)
                return .stopped
            }
            if ready == 0 {
                let server = Self.serverName(conn)
                PQfinish(conn)
                let waited = limit.map { Self.seconds($0) } ?? "a day"
                return .failed(KeychainError(.notAvailable, "cannot connect to PostgreSQL: \(server)no answer within \(waited)",
                                             underlying: PostgresFailure(.connect)))
            }
            step = PQconnectPoll(conn)
        }
        let message = redacted(lastMessage(of: conn))
        let status: KeychainStatus = Self.isAuthenticationFailure(conn, message) ? .authFailed : .notAvailable
        PQfinish(conn)
        return .failed(KeychainError(status, "cannot connect to PostgreSQL: \(message)", underlying: PostgresFailure(.connect)))
    }

    /// The attempt's `connect_timeout` as libpq resolved it (the string, PGCONNECT_TIMEOUT, our
    /// default), with libpq's rules: zero or less waits for ever, and less than 2 s is 2 s.
    private static func connectTimeout(of conn: OpaquePointer) -> Duration? {
        guard let options = PQconninfo(conn) else { return .seconds(10) }
        defer { PQconninfoFree(options) }
        guard let text = values(in: options, ["connect_timeout"])["connect_timeout"] else { return nil }
        guard let seconds = Int(text.filter { $0 != " " }) else { return .seconds(10) }
        return seconds <= 0 ? nil : .seconds(max(seconds, 2))
    }

    /// "connection to server at "HOST", port PORT failed: " for a timeout's message (libpq's own
    /// wording for its failures); empty if libpq has not got that far.
    private static func serverName(_ conn: OpaquePointer) -> String {
        guard let host = PQhost(conn).map({ String(cString: $0) }), !host.isEmpty else { return "" }
        let port = PQport(conn).map { String(cString: $0) } ?? ""
        return "connection to server at \"\(host)\"\(port.isEmpty ? "" : ", port \(port)") failed: "
    }

    /// The connects to try, in order, each as the settings that pick its host. libpq moves to
    /// the next host of a list when one does not answer within `connect_timeout` only in its
    /// blocking connect; a non-blocking connect stays on a silent host. So a list of several
    /// hosts is tried one host at a time, each with its own timeout; one host (or a list libpq
    /// will refuse, its lengths not matching) is one attempt, left as the string says.
    private static func hostAttempts(_ values: [String: String]) -> [[(String, String)]] {
        func list(_ key: String) -> [String] {
            values[key].map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) } ?? []
        }
        let hosts = list("host"), addresses = list("hostaddr"), ports = list("port")
        let count = max(hosts.count, addresses.count)
        guard count > 1, hosts.isEmpty || hosts.count == count, addresses.isEmpty || addresses.count == count,
              ports.count <= 1 || ports.count == count else { return [[]] }
        return (0..<count).map { i in
            var settings: [(String, String)] = []
            if !hosts.isEmpty { settings.append(("host", hosts[i])) }
            if !addresses.isEmpty { settings.append(("hostaddr", addresses[i])) }
            if ports.count == count { settings.append(("port", ports[i])) }
            return settings
        }
    }

    /// The values `keys` have in a libpq option array (those set).
    private static func values(in options: UnsafeMutablePointer<PQconninfoOption>, _ keys: Set<String>) -> [String: String] {
        var out: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            let key = String(cString: keyword)
            if keys.contains(key), let value = option.pointee.val { out[key] = String(cString: value) }
            option += 1
        }
        return out
    }

    deinit { close() }

    /// Closes the connection (idempotent); every later call fails as connection lost.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    /// Whether the connection is open and has not been seen to break.
    public var isConnected: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    /// The server process serving this connection (what a notification from itself carries).
    public var serverProcessID: Int32 { handle.map { PQbackendPID($0) } ?? 0 }

    /// A handle that cancels whatever statement this connection runs at the time, from any
    /// thread: how the daemon stops a sync thread that is inside a statement without waiting for
    /// its timeout. The statement then fails with SQLSTATE 57014 and the connection stays usable.
    /// Made per connection; a new connection needs a new one.
    public func makeCanceller() throws(KeychainError) -> Canceller {
        let conn = try openHandle()
        guard let cancel = PQgetCancel(conn) else {
            throw KeychainError(.allocate, "cannot make a cancel request for the PostgreSQL connection")
        }
        return Canceller(cancel)
    }

    public final class Canceller: Sendable {
        // PGcancel holds a copy of what a cancel request needs; PQcancel on it is safe from any
        // thread, even while the connection's own thread waits on a statement. The lock only
        // keeps two cancels (and the free) apart. Kept as its address: a pointer is not Sendable,
        // and nothing but this type ever holds it.
        private let request: Mutex<UInt>

        fileprivate init(_ request: OpaquePointer) { self.request = Mutex(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(request)))) }

        deinit { request.withLock { PQfreeCancel(OpaquePointer(bitPattern: $0)) } }

        /// Asks the server to cancel the running statement; false if the request could not be
        /// sent. A statement that already finished is not affected.
        @discardableResult
        public func cancel() -> Bool {
            request.withLock { address in
                var buffer = [CChar](repeating: 0, count: 256)
                return PQcancel(OpaquePointer(bitPattern: address), &buffer, Int32(buffer.count)) == 1
            }
        }
    }

    // MARK: Statements

    /// Runs one statement with `$1, $2...` bound to `parameters` and returns its rows.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = []) throws(KeychainError) -> PostgresResult {
        try run(sql, parameters, timeout: statementTimeout)
    }

    /// Runs one statement with its own timeout instead of `statementTimeout`.
    @discardableResult
    public func query(_ sql: String, _ parameters: [PostgresValue] = [], timeout: Duration) throws(KeychainError) -> PostgresResult {
        try run(sql, parameters, timeout: timeout)
    }

    /// Runs `body` in one transaction: committed if it returns, rolled back if it throws (or if a
    /// statement in it failed and `body` went on regardless: PostgreSQL would otherwise turn the
    /// COMMIT into a silent ROLLBACK).
    @discardableResult
    public func transaction<T>(_ body: (PostgresConnection) throws(KeychainError) -> T) throws(KeychainError) -> T {
        try query("BEGIN")
        do throws(KeychainError) {
            let result = try body(self)
            if let handle, PQtransactionStatus(handle) == PQTRANS_INERROR {
                throw KeychainError(.internal, "a statement of the transaction failed; it was rolled back",
                                    underlying: PostgresFailure(.server))
            }
            try query("COMMIT")
            return result
        } catch {
            if isConnected { _ = try? query("ROLLBACK") }
            throw error
        }
    }

    // MARK: LISTEN and NOTIFY

    /// Starts receiving notifications on `channel`: lowercase letters, digits and underscores,
    /// at most 63 bytes (PostgreSQL folds an unquoted LISTEN name to lowercase but pg_notify
    /// does not, so only names that fold to themselves are accepted: §7.1).
    public func listen(_ channel: String) throws(KeychainError) {
        try Self.checkChannel(channel)
        try query("LISTEN \(channel)")
    }

    public func unlisten(_ channel: String) throws(KeychainError) {
        try Self.checkChannel(channel)
        try query("UNLISTEN \(channel)")
    }

    /// Sends a notification, delivered to listeners when the surrounding transaction commits.
    public func notify(_ channel: String, payload: String) throws(KeychainError) {
        try Self.checkChannel(channel)
        try query("SELECT pg_notify($1, $2)", [.text(channel), .text(payload)])
    }

    public enum WaitOutcome: Sendable, Equatable {
        /// Notifications arrived (every one received so far, oldest first).
        case notified([PostgresNotification])
        /// The wake-up was signalled (and is now drained).
        case woken
        /// Neither within the timeout.
        case timedOut
    }

    /// Waits until a notification arrives, `wakeup` is signalled, or `timeout` passes: the sync
    /// thread's one blocking point (§7.2). Notifications that arrived during earlier statements
    /// are returned at once. When both are ready, notifications come first and the wake-up stays
    /// pending for the next call. A broken connection throws (connection lost).
    public func waitForNotifications(wakeup: Wakeup? = nil, timeout: Duration) throws(KeychainError) -> WaitOutcome {
        let conn = try openHandle()
        let deadline = ContinuousClock.now + timeout
        while true {
            let pending = Self.takeNotifications(conn)
            if !pending.isEmpty { return .notified(pending) }
            var fds = [pollfd(fd: PQsocket(conn), events: Int16(POLLIN), revents: 0)]
            if let wakeup { fds.append(pollfd(fd: wakeup.fileDescriptor, events: Int16(POLLIN), revents: 0)) }
            let ready = try Self.poll(&fds, until: deadline)
            if ready == 0 { return .timedOut }
            if fds[0].revents != 0 {
                try consumeInput(conn)
                continue
            }
            if let wakeup, fds[1].revents != 0, wakeup.drain() { return .woken }
        }
    }

    // MARK: Internals

    private func openHandle() throws(KeychainError) -> OpaquePointer {
        guard let handle, PQstatus(handle) == CONNECTION_OK else {
            close()
            throw Self.lost("the connection to PostgreSQL is closed")
        }
        return handle
    }

    private func run(_ sql: String, _ parameters: [PostgresValue], timeout: Duration) throws(KeychainError) -> PostgresResult {
        let conn = try openHandle()
        let sent = Self.withParameters(parameters) { types, values, lengths, formats in
            PQsendQueryParams(conn, sql, Int32(parameters.count), types, values, lengths, formats, 1)
        }
        guard sent == 1 else { throw failure(conn, doing: "cannot send a statement to PostgreSQL") }

        // Every result of the statement is read, so that the connection is idle afterwards;
        // the first error wins, otherwise the last result is the statement's.
        var deadline = ContinuousClock.now + timeout
        var cancelled = false
        var answer: PostgresResult?
        var firstError: KeychainError?
        while true {
            while PQisBusy(conn) == 1 {
                var fds = [pollfd(fd: PQsocket(conn), events: Int16(POLLIN), revents: 0)]
                if try Self.poll(&fds, until: deadline) == 0 {
                    if cancelled {
                        close()
                        throw KeychainError(.notAvailable, "PostgreSQL answered neither a statement nor its cancellation within \(Self.seconds(timeout + Self.cancelGrace)); the connection is closed",
                                            underlying: PostgresFailure(.timedOut))
                    }
                    cancelled = true
                    Self.requestCancel(conn)
                    deadline = ContinuousClock.now + Self.cancelGrace
                    continue
                }
                try consumeInput(conn)
            }
            guard let result = PQgetResult(conn) else { break }
            defer { PQclear(result) }
            if firstError != nil { continue }
            switch PQresultStatus(result) {
            case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY:
                do { answer = try Self.copy(result) } catch { firstError = error }
            default:
                firstError = serverError(result, conn: conn)
            }
        }
        if PQstatus(conn) != CONNECTION_OK {
            let message = redacted(lastMessage(of: conn))
            close()
            throw Self.lost("the connection to PostgreSQL broke: \(message)")
        }
        if var error = firstError {
            if cancelled, (error.underlying as? PostgresFailure)?.sqlState == "57014" {
                error = KeychainError(.notAvailable, "PostgreSQL did not answer within \(Self.seconds(timeout)); the statement was cancelled",
                                      underlying: PostgresFailure(.timedOut, sqlState: "57014"))
            }
            throw error
        }
        return answer ?? PostgresResult(columnNames: [], rows: [], affectedRows: 0)
    }

    /// Reads what the server sent; a closed or broken socket closes the connection.
    private func consumeInput(_ conn: OpaquePointer) throws(KeychainError) {
        if PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK {
            let message = redacted(lastMessage(of: conn))
            close()
            throw Self.lost("the connection to PostgreSQL broke: \(message)")
        }
    }

    /// A failed call whose cause is on the connection: lost if the connection broke.
    private func failure(_ conn: OpaquePointer, doing: String) -> KeychainError {
        let message = redacted(lastMessage(of: conn))
        if PQstatus(conn) != CONNECTION_OK {
            close()
            return Self.lost("\(doing): \(message)")
        }
        return KeychainError(.internal, "\(doing): \(message)", underlying: PostgresFailure(.server))
    }

    private func serverError(_ result: OpaquePointer, conn: OpaquePointer) -> KeychainError {
        let state = PQresultErrorField(result, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        let primary = PQresultErrorField(result, Int32(UInt8(ascii: "M"))).map { String(cString: $0) }
        let message = redacted(primary ?? String(cString: PQresultErrorMessage(result)))
        guard let state else {
            // libpq's own error (no SQLSTATE): the connection broke while reading the result.
            return KeychainError(.notAvailable, "PostgreSQL: \(message)", underlying: PostgresFailure(.connectionLost))
        }
        return KeychainError(PostgresFailure.status(forSQLState: state), "PostgreSQL refused a statement (SQLSTATE \(state)): \(message)",
                             underlying: PostgresFailure(.server, sqlState: state))
    }

    private func redacted(_ message: String) -> String {
        guard let password = passwordToRedact, !password.isEmpty else { return message }
        var bytes = Array(message.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        while i < bytes.count {
            if bytes.count - i >= password.count, bytes[i..<(i + password.count)].elementsEqual(password) {
                out.append(contentsOf: "(password)".utf8)
                i += password.count
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        bytes = out
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func lost(_ message: String) -> KeychainError {
        KeychainError(.notAvailable, message, underlying: PostgresFailure(.connectionLost))
    }

    /// Asks the server to cancel the running statement (a separate short connection, as libpq
    /// does it). Best effort: whether it worked shows in the statement's result.
    private static func requestCancel(_ conn: OpaquePointer) {
        guard let cancel = PQgetCancel(conn) else { return }
        var buffer = [CChar](repeating: 0, count: 256)
        _ = PQcancel(cancel, &buffer, Int32(buffer.count))
        PQfreeCancel(cancel)
    }

    private static func takeNotifications(_ conn: OpaquePointer) -> [PostgresNotification] {
        var received: [PostgresNotification] = []
        while let n = PQnotifies(conn) {
            received.append(PostgresNotification(channel: String(cString: n.pointee.relname),
                                                 payload: String(cString: n.pointee.extra),
                                                 senderProcessID: n.pointee.be_pid))
            PQfreemem(n)
        }
        return received
    }

    /// poll(2) until `deadline`; returns how many descriptors are ready (0: the deadline passed).
    private static func poll(_ fds: inout [pollfd], until deadline: ContinuousClock.Instant) throws(KeychainError) -> Int32 {
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            let milliseconds = left <= .zero ? 0 : Int32(min((left / .milliseconds(1)).rounded(.up), Double(Int32.max)))
            let ready = fds.withUnsafeMutableBufferPointer { Glibc.poll($0.baseAddress, nfds_t($0.count), milliseconds) }
            if ready >= 0 { return ready }
            if errno != EINTR { throw SystemCallError.current("poll").keychainError("cannot wait on the PostgreSQL connection") }
        }
    }

    private static func checkChannel(_ channel: String) throws(KeychainError) {
        let bytes = Array(channel.utf8)
        let valid = !bytes.isEmpty && bytes.count <= 63 && !(bytes[0] >= UInt8(ascii: "0") && bytes[0] <= UInt8(ascii: "9"))
            && bytes.allSatisfy { ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z")) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || $0 == UInt8(ascii: "_") }
        guard valid else {
            throw .param("a notification channel is 1 to 63 lowercase letters, digits and underscores, not starting with a digit")
        }
    }

    private static func isAuthenticationFailure(_ conn: OpaquePointer, _ message: String) -> Bool {
        // libpq gives no SQLSTATE for a failed connection; the server's FATAL message names it
        // (English with the C locale a daemon runs under).
        PQconnectionNeedsPassword(conn) == 1 || message.contains("authentication failed")
    }

    private static func password(in options: UnsafeMutablePointer<PQconninfoOption>) -> [UInt8]? {
        var option = options
        while let keyword = option.pointee.keyword {
            if String(cString: keyword) == "password", let value = option.pointee.val {
                return Array(String(cString: value).utf8)
            }
            option += 1
        }
        return nil
    }

    private static func seconds(_ d: Duration) -> String {
        let ms = d / .milliseconds(1)
        return ms < 1000 ? "\(Int(ms)) ms" : "\((ms / 100).rounded() / 10) s"
    }

    // MARK: Binary values

    private enum TypeOID {
        static let bool: UInt32 = 16, bytea: UInt32 = 17, name: UInt32 = 19, int8: UInt32 = 20
        static let int2: UInt32 = 21, int4: UInt32 = 23, text: UInt32 = 25, bpchar: UInt32 = 1042
        static let varchar: UInt32 = 1043, void: UInt32 = 2278
    }

    /// Lays the parameters out for PQsendQueryParams: one buffer holding every value's binary
    /// form, and pointers into it (nil for NULL; a zero-length value still points somewhere, as
    /// nil would mean NULL).
    private static func withParameters<R>(_ parameters: [PostgresValue],
                                          _ body: (UnsafePointer<UInt32>?, UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?, UnsafePointer<Int32>?) -> R) -> R {
        var storage: [UInt8] = []
        var types: [UInt32] = [], offsets: [Int?] = [], lengths: [Int32] = []
        for value in parameters {
            let start = storage.count
            switch value {
            case .null:
                types.append(0) // the server infers it from the statement
                offsets.append(nil)
                lengths.append(0)
                continue
            case .bool(let b):
                types.append(TypeOID.bool)
                storage.append(b ? 1 : 0)
            case .int(let i):
                types.append(TypeOID.int8)
                withUnsafeBytes(of: i.bigEndian) { storage.append(contentsOf: $0) }
            case .text(let s):
                types.append(TypeOID.text)
                storage.append(contentsOf: s.utf8)
            case .bytea(let b):
                types.append(TypeOID.bytea)
                storage.append(contentsOf: b)
            }
            offsets.append(start)
            lengths.append(Int32(storage.count - start))
        }
        storage.append(0)
        let formats = [Int32](repeating: 1, count: parameters.count)
        return storage.withUnsafeBytes { raw in
            let base = raw.baseAddress!.assumingMemoryBound(to: CChar.self)
            let pointers: [UnsafePointer<CChar>?] = offsets.map { $0.map { base + $0 } }
            return body(types, pointers, lengths, formats)
        }
    }

    /// Copies a result out of libpq, decoding each binary value by its column's type.
    private static func copy(_ result: OpaquePointer) throws(KeychainError) -> PostgresResult {
        let columns = Int(PQnfields(result)), count = Int(PQntuples(result))
        let names = (0..<columns).map { String(cString: PQfname(result, Int32($0))) }
        let types = (0..<columns).map { PQftype(result, Int32($0)) }
        var rows: [[PostgresValue]] = []
        rows.reserveCapacity(count)
        for r in 0..<count {
            var row: [PostgresValue] = []
            row.reserveCapacity(columns)
            for c in 0..<columns {
                if PQgetisnull(result, Int32(r), Int32(c)) == 1 {
                    row.append(.null)
                    continue
                }
                let length = Int(PQgetlength(result, Int32(r), Int32(c)))
                let bytes = PQgetvalue(result, Int32(r), Int32(c)).withMemoryRebound(to: UInt8.self, capacity: length) {
                    Array(UnsafeBufferPointer(start: $0, count: length))
                }
                row.append(try decode(bytes, type: types[c], column: names[c]))
            }
            rows.append(row)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return PostgresResult(columnNames: names, rows: rows, affectedRows: affected)
    }

    private static func decode(_ bytes: [UInt8], type: UInt32, column: String) throws(KeychainError) -> PostgresValue {
        func integer(_ width: Int) throws(KeychainError) -> PostgresValue {
            guard bytes.count == width else { throw unreadable("column \(column) holds \(bytes.count) bytes for a \(width)-byte integer") }
            var value: Int64 = bytes[0] >= 0x80 ? -1 : 0 // sign-extended
            for b in bytes { value = value << 8 | Int64(b) }
            return .int(value)
        }
        switch type {
        case TypeOID.bytea: return .bytea(bytes)
        case TypeOID.int8: return try integer(8)
        case TypeOID.int4: return try integer(4)
        case TypeOID.int2: return try integer(2)
        case TypeOID.bool:
            guard bytes.count == 1 else { throw unreadable("column \(column) holds \(bytes.count) bytes for a boolean") }
            return .bool(bytes[0] != 0)
        case TypeOID.text, TypeOID.varchar, TypeOID.name, TypeOID.bpchar:
            guard let s = String(validating: bytes, as: UTF8.self) else { throw unreadable("column \(column) holds text that is not UTF-8") }
            return .text(s)
        case TypeOID.void: return .null
        default:
            throw unreadable("column \(column) has a type (OID \(type)) that PostgresConnection does not read; cast it to bytea, int8, text or boolean in the statement")
        }
    }

    private static func unreadable(_ message: String) -> KeychainError {
        KeychainError(.decode, message, underlying: PostgresFailure(.unreadableResult))
    }

    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// libpq's message for the connection's last failure, on one line.
private func lastMessage(of conn: OpaquePointer) -> String {
    String(cString: PQerrorMessage(conn))
        .split(whereSeparator: \.isNewline)
        .map { $0.trimmingPrefixSpaces() }
        .joined(separator: "; ")
}

private extension Substring {
    func trimmingPrefixSpaces() -> Substring { drop(while: { $0 == " " || $0 == "\t" }) }
}

extension PostgresConnection {
    /// The keywords a connection string sets and their values, as libpq itself parses it, so
    /// that the daemon's config check reads the string exactly as the connect will. Callers
    /// must never show the value of `password`. errSecParam (the string not repeated) for one
    /// libpq cannot parse.
    public static func settings(of connectionString: String) throws(KeychainError) -> [String: String] {
        var parseError: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(connectionString, &parseError) else {
            if let parseError { PQfreemem(parseError) }
            throw KeychainError(.param, "the PostgreSQL connection string is not valid (libpq conninfo or postgresql:// URI); it is not repeated here, as it may hold a password",
                                underlying: PostgresFailure(.badConnectionString))
        }
        defer { PQconninfoFree(options) }
        var out: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { out[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        return out
    }
}
