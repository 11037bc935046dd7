#!/usr/bin/python3
# A hostile client of the Secret Service bridge, for
# Tests/IntegrationTests/SecretServiceAttackTests.swift. Each command tries one family of
# attacks and prints one JSON object: {attempt: "ok", a result, or the D-Bus error name}.
#   victim COLLECTION               -> {"path": p, "session": s}: an item with attributes
#                                      owner=victim, then stays connected until stdin closes
#   check PATH                      -> {"secret", "label"}: the victim reads its own item back
#   foreign PATH SESSION            -> every call another uid might make, against PATH
#   confined COLLECTION PATH        -> another app's attempts on PATH (same uid, other group)
#   hijack PATH SESSION             -> another connection using SESSION (the victim's)
#   oversized                       -> huge secrets, labels, attribute sets, nesting
#   sessions                        -> 17 sessions on one connection, then one on another
#   execfirst COLLECTION NEXT       -> creates an item, reads it, then execs NEXT (another
#                                      interpreter) on the same connection, which asks for it:
#                                      {"before": ..., "after": ...}
#   execread COLLECTION NEXT        -> creates an item and a collection, reads the item's Label,
#                                      Attributes and all its properties and the service's
#                                      Collections, then execs NEXT on the same connection, which
#                                      reads them again at once and then on a new connection of its
#                                      own: {"before", "after", "stranger", "seconds" from the
#                                      first read to the last on the inherited connection}
#   passfirst COLLECTION NEXT       -> the same, but a child runs NEXT with the connection while
#                                      this process lives, then this process exits:
#                                      {"before", "while the opener lives", "after it exits"}
#   prompts                         -> unlock prompts past the limits, and of another connection
#   portal KIND                     -> RetrieveSecret with a descriptor of KIND (fullpipe,
#                                      noreader, readend, file): {"response", "seconds", "after"}
import itertools
import json
import os
import socket
import sys
import tempfile
import time

from jeepney import DBusAddress, MatchRule, message_bus, new_method_call
from jeepney.io.blocking import DBusConnection, DBusConnectionBase, Proxy, _Future, open_dbus_connection
from jeepney.io.common import MessageFilters
from jeepney.routing import Router
from jeepney.wrappers import DBusErrorResponse, unwrap_msg

NAME = "org.freedesktop.secrets"
SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name=NAME, interface="org.freedesktop.Secret.Service")
COLLECTIONS = {"login": "/org/freedesktop/secrets/collection/login",
               "session": "/org/freedesktop/secrets/collection/session"}
LABEL = "org.freedesktop.Secret.Item.Label"
ATTRIBUTES = "org.freedesktop.Secret.Item.Attributes"
VICTIM = {"owner": "victim", "xdg:schema": "org.example.Victim"}


def address(path, interface):
    return DBusAddress(path, bus_name=NAME, interface=interface)


def call(conn, target, member, signature=None, body=(), timeout=30):
    return unwrap_msg(conn.send_and_get_reply(new_method_call(target, member, signature, body), timeout=timeout))


def outcome(conn, target, member, signature=None, body=(), result=lambda r: "ok", timeout=30):
    try:
        return result(call(conn, target, member, signature, body, timeout=timeout))
    except DBusErrorResponse as error:
        return error.name
    except TimeoutError:
        return "timeout"


def plain_session(conn):
    return call(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))[1]


def create(conn, collection, session, attributes, secret=b"s3cret", label="victim's label", replace=False):
    properties = {LABEL: ("s", label), ATTRIBUTES: ("a{ss}", attributes)}
    return call(conn, address(COLLECTIONS[collection], "org.freedesktop.Secret.Collection"), "CreateItem",
                "a{sv}(oayays)b", (properties, (session, b"", secret, "text/plain"), replace))[0]


def create_outcome(conn, collection, session, attributes, **kwargs):
    try:
        return create(conn, collection, session, attributes, **kwargs)
    except DBusErrorResponse as error:
        return error.name


def item_calls(conn, path, session):
    """Everything one can do to an item path; each outcome."""
    item = address(path, "org.freedesktop.Secret.Item")
    props = address(path, "org.freedesktop.DBus.Properties")
    i = "org.freedesktop.Secret.Item"
    return {
        "GetSecret": outcome(conn, item, "GetSecret", "o", (session,), lambda r: r[0][2].decode(errors="replace")),
        "GetSecrets": outcome(conn, SERVICE, "GetSecrets", "aoo", ([path], session), lambda r: sorted(r[0])),
        "Get Label": outcome(conn, props, "Get", "ss", (i, "Label"), lambda r: r[0][1]),
        "Get Attributes": outcome(conn, props, "Get", "ss", (i, "Attributes"), lambda r: r[0][1]),
        "Get Locked": outcome(conn, props, "Get", "ss", (i, "Locked")),
        "GetAll": outcome(conn, props, "GetAll", "s", (i,)),
        "Set Label": outcome(conn, props, "Set", "ssv", (i, "Label", ("s", "taken"))),
        "Set Attributes": outcome(conn, props, "Set", "ssv", (i, "Attributes", ("a{ss}", {"owner": "thief"}))),
        "SetSecret": outcome(conn, item, "SetSecret", "(oayays)", ((session, b"", b"overwritten", "text/plain"),)),
        "Delete": outcome(conn, item, "Delete"),
    }


def searches(conn, collection):
    found = {}
    found["Service.SearchItems"] = outcome(conn, SERVICE, "SearchItems", "a{ss}", (VICTIM,), lambda r: r[0] + r[1])
    for name, path in COLLECTIONS.items():
        c = address(path, "org.freedesktop.Secret.Collection")
        found[name + " SearchItems"] = outcome(conn, c, "SearchItems", "a{ss}", (VICTIM,), lambda r: r[0])
        found[name + " Items"] = outcome(conn, address(path, "org.freedesktop.DBus.Properties"), "Get", "ss",
                                         ("org.freedesktop.Secret.Collection", "Items"), lambda r: r[0][1])
    return found


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def readings(conn, path):
    """What a cache could answer about PATH and the caller's collections; each outcome."""
    props = address(path, "org.freedesktop.DBus.Properties")
    i = "org.freedesktop.Secret.Item"
    return {
        "Get Label": outcome(conn, props, "Get", "ss", (i, "Label"), lambda r: r[0][1]),
        "Get Attributes": outcome(conn, props, "Get", "ss", (i, "Attributes"), lambda r: r[0][1]),
        "GetAll": outcome(conn, props, "GetAll", "s", (i,), lambda r: {k: v[1] for k, v in sorted(r[0].items())}),
        "Collections": outcome(conn, address(SERVICE.object_path, "org.freedesktop.DBus.Properties"), "Get", "ss",
                               (SERVICE.interface, "Collections"), lambda r: sorted(r[0][1])),
    }


command = sys.argv[1]
if command == "execreadsecond":
    # Past Hello on the inherited connection, as in execsecond, with serials after the first
    # program's, so that the bus sees one client going on.
    path, fd, serial, before, started = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6])
    conn = DBusConnection.__new__(DBusConnection)
    DBusConnectionBase.__init__(conn, socket.socket(fileno=fd))
    conn.outgoing_serial = itertools.count(start=serial)
    conn._router = Router(_Future)
    conn._filters = MessageFilters()
    after = readings(conn, path)
    seconds = time.monotonic() - started
    stranger = readings(open_dbus_connection(bus="SESSION"), path)
    print(json.dumps({"before": json.loads(before), "after": after, "stranger": stranger, "seconds": seconds}))
    sys.exit(0)
if command in ("execsecond", "passsecond"):
    # The connection the first program opened, inherited through exec: already past Hello,
    # which jeepney's constructor would send again.
    conn = DBusConnection.__new__(DBusConnection)
    DBusConnectionBase.__init__(conn, socket.socket(fileno=int(sys.argv[3])))
    conn._router = Router(_Future)
    conn._filters = MessageFilters()
    def get():
        return outcome(conn, address(sys.argv[2], "org.freedesktop.Secret.Item"), "GetSecret", "o", (sys.argv[5],),
                       lambda r: r[0][2].decode())
    if command == "execsecond":
        print(json.dumps({"before": sys.argv[4], "after": get()}))
        sys.exit(0)
    # passsecond: first while the process that opened the connection lives, then after it exits.
    opener = os.getppid()
    living = get()
    os.close(int(sys.argv[6]))
    for _ in range(500):
        if os.getppid() != opener:
            break
        time.sleep(0.01)
    time.sleep(0.2)
    print(json.dumps({"before": sys.argv[4], "while the opener lives": living, "after it exits": get()}))
    sys.exit(0)

conn = open_dbus_connection(bus="SESSION", enable_fds=True)
results = {}
if command == "victim":
    session = plain_session(conn)
    path = create(conn, sys.argv[2], session, VICTIM)
    print(json.dumps({"path": path, "session": session}), flush=True)
    sys.stdin.read()
elif command == "check":
    session = plain_session(conn)
    results = item_calls(conn, sys.argv[2], session)
    results = {"secret": results["GetSecret"], "label": results["Get Label"]}
elif command == "foreign":
    path, victim_session = sys.argv[2], sys.argv[3]
    results["OpenSession"] = outcome(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
    results.update(item_calls(conn, path, victim_session))
    results.update(searches(conn, "login"))
    results["CreateItem"] = create_outcome(conn, "login", victim_session, VICTIM, replace=True)
    results["Unlock"] = outcome(conn, SERVICE, "Unlock", "ao", ([COLLECTIONS["login"]],))
    results["Lock"] = outcome(conn, SERVICE, "Lock", "ao", ([COLLECTIONS["login"]],))
    results["ReadAlias"] = outcome(conn, SERVICE, "ReadAlias", "s", ("default",))
    results["Session.Close"] = outcome(conn, address(victim_session, "org.freedesktop.Secret.Session"), "Close")
elif command == "confined":
    collection, path = sys.argv[2], sys.argv[3]
    session = plain_session(conn)
    results.update(item_calls(conn, path, session))
    results.update(searches(conn, collection))
    # The victim's exact attribute set, with replace: must make an item of our own.
    results["CreateItem replace"] = create_outcome(conn, collection, session, VICTIM, secret=b"planted", replace=True)
elif command == "hijack":
    path, victim_session = sys.argv[2], sys.argv[3]
    results["GetSecret"] = outcome(conn, address(path, "org.freedesktop.Secret.Item"), "GetSecret", "o", (victim_session,))
    results["GetSecrets"] = outcome(conn, SERVICE, "GetSecrets", "aoo", ([path], victim_session))
    results["CreateItem"] = create_outcome(conn, "login", victim_session, {"a": "b"})
    results["Close"] = outcome(conn, address(victim_session, "org.freedesktop.Secret.Session"), "Close")
elif command == "oversized":
    session = plain_session(conn)
    mine = create(conn, "login", session, {"mine": "1"})
    results["login 2 MiB secret"] = create_outcome(conn, "login", session, {"a": "1"}, secret=b"x" * (2 << 20))
    results["login 2 MiB label"] = create_outcome(conn, "login", session, {"a": "2"}, label="x" * (2 << 20))
    props = address(mine, "org.freedesktop.DBus.Properties")
    results["Set 2 MiB label"] = outcome(conn, props, "Set", "ssv", ("org.freedesktop.Secret.Item", "Label", ("s", "x" * (2 << 20))))
    results["SetSecret 2 MiB"] = outcome(conn, address(mine, "org.freedesktop.Secret.Item"), "SetSecret", "(oayays)",
                                         ((session, b"", b"x" * (2 << 20), "text/plain"),))
    results["session 2 MiB secret"] = create_outcome(conn, "session", session, {"a": "3"}, secret=b"x" * (2 << 20))
    results["session 20 MiB label"] = create_outcome(conn, "session", session, {"a": "4"}, label="x" * (20 << 20))
    # Labels within the per-item limit until the collection is full.
    filled = "none refused"
    for n in range(1000):
        r = create_outcome(conn, "session", session, {"n": str(n)}, label="l" * (60 << 10))
        if not r.startswith("/"):
            filled = r
            break
    results["session filled with labels"] = filled
    big = {"name%03d%s" % (n, "n" * 1017): "v" for n in range(128)}
    results["SearchItems 128 x 1 KiB names"] = outcome(conn, SERVICE, "SearchItems", "a{ss}", (big,))
    wide = {"name%03d%s" % (n, "n" * 400): "v" * 100 for n in range(127)}
    started = time.monotonic()
    results["SearchItems 127 pairs, 64 KiB"] = outcome(conn, SERVICE, "SearchItems", "a{ss}", (wide,), lambda r: r[0] + r[1])
    results["SearchItems seconds"] = time.monotonic() - started
    nested = ("s", "x")
    for _ in range(60):
        nested = ("v", nested)
    results["CreateItem nested variants"] = outcome(
        conn, address(COLLECTIONS["login"], "org.freedesktop.Secret.Collection"), "CreateItem", "a{sv}(oayays)b",
        ({LABEL: nested}, (session, b"", b"x", "text/plain"), False), lambda r: "ok")
    many = [COLLECTIONS["login"] + "/" + os.urandom(16).hex() for _ in range(20000)]
    started = time.monotonic()
    results["GetSecrets 20,000 paths"] = outcome(conn, SERVICE, "GetSecrets", "aoo", (many, session), lambda r: len(r[0]))
    results["GetSecrets seconds"] = time.monotonic() - started
    results["still serving"] = outcome(conn, address(mine, "org.freedesktop.Secret.Item"), "GetSecret", "o", (session,),
                                       lambda r: r[0][2].decode())
elif command == "sessions":
    opened = [outcome(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")), lambda r: "ok") for _ in range(17)]
    results["first 16"] = sorted(set(opened[:16]))
    results["17th"] = opened[16]
    other = open_dbus_connection(bus="SESSION")
    results["another connection"] = outcome(other, SERVICE, "OpenSession", "sv", ("plain", ("s", "")), lambda r: "ok")
elif command == "execread":
    session = plain_session(conn)
    path = create(conn, sys.argv[2], session, VICTIM)
    call(conn, SERVICE, "CreateCollection", "a{sv}s", ({"org.freedesktop.Secret.Collection.Label": ("s", "victim's collection")}, ""))
    started = time.monotonic()  # CLOCK_MONOTONIC: the same clock after exec
    before = readings(conn, path)
    fd = conn.sock.fileno()
    os.set_inheritable(fd, True)
    serial = next(conn.outgoing_serial)
    os.execv(sys.argv[3], [sys.argv[3], sys.argv[0], "execreadsecond", path, str(fd), str(serial),
                           json.dumps(before), str(started)])
elif command == "flood":
    # flood sessions|items: as many sessions (16 per connection, connection after connection)
    # or session-collection items as the bridge gives, up to its limit for everyone (1,024);
    # {"taken": how many, "refusal": the error that stopped it, or null}.
    taken, refusal, connections = 0, None, [conn]
    if sys.argv[2] == "sessions":
        while taken < 1024 and refusal is None:
            if taken and taken % 16 == 0:
                connections.append(open_dbus_connection(bus="SESSION"))
            answer = outcome(connections[-1], SERVICE, "OpenSession", "sv", ("plain", ("s", "")), lambda r: "ok")
            if answer == "ok":
                taken += 1
            else:
                refusal = answer
    else:
        session = plain_session(conn)
        while taken < 1024 and refusal is None:
            answer = create_outcome(conn, "session", session, {"flood": str(taken)}, secret=b"x", label="")
            if answer.startswith("/"):
                taken += 1
            else:
                refusal = answer
    results = {"taken": taken, "refusal": refusal}
    print(json.dumps(results), flush=True)
    sys.stdin.read()  # holds what it took until told to go
    sys.exit(0)
elif command == "served":
    # served sessions|items: one more session, or one session-collection item: "ok" or the error.
    session = outcome(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")), lambda r: r[1])
    if sys.argv[2] == "sessions" or not session.startswith("/"):
        results = {"answer": "ok" if session.startswith("/") else session}
    else:
        made = create_outcome(conn, "session", session, {"served": "1"})
        results = {"answer": "ok" if made.startswith("/") else made}
elif command == "forkexec":
    # forkexec VICTIM_PATH PROGRAM MODE LOG: this process (app A) connects, forks a child that
    # keeps the connection, and execs PROGRAM (the victim's app) itself, so that the bus's pid
    # for the connection runs the victim's program; the child then asks for the victim's item.
    # MODE "called": one call before the fork; "silent": none, only waiting until the bridge's
    # LOG says it saw the connection join (NameOwnerChanged).
    path, program, mode, log = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    if mode == "called":
        results["before"] = outcome(conn, SERVICE, "SearchItems", "a{ss}", (VICTIM,), lambda r: "ok")
    else:
        for _ in range(3000):
            with open(log) as f:
                if conn.unique_name + " joined the bus" in f.read():
                    break
            time.sleep(0.01)
    opener = os.getpid()
    child = os.fork()
    if child == 0:
        target = os.path.realpath(program)
        for _ in range(3000):
            try:
                if os.readlink("/proc/%d/exe" % opener) == target:
                    break
            except OSError:
                pass
            time.sleep(0.01)
        session = outcome(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")), lambda r: r[1])
        results["OpenSession"] = "ok" if session.startswith("/") else session
        session = session if session.startswith("/") else "/"
        results["SearchItems"] = outcome(conn, SERVICE, "SearchItems", "a{ss}", (VICTIM,), lambda r: r[0] + r[1])
        item = address(path, "org.freedesktop.Secret.Item")
        results["GetSecret"] = outcome(conn, item, "GetSecret", "o", (session,), lambda r: r[0][2].decode())
        results["Get Label"] = outcome(conn, address(path, "org.freedesktop.DBus.Properties"), "Get", "ss",
                                       ("org.freedesktop.Secret.Item", "Label"), lambda r: r[0][1])
        print(json.dumps(results), flush=True)
        os._exit(0)
    os.execv(program, [program, "-c", "import os; os.waitpid(%d, 0)" % child])
elif command in ("execfirst", "passfirst"):
    session = plain_session(conn)
    path = create(conn, sys.argv[2], session, {"exec": "1"})
    before = outcome(conn, address(path, "org.freedesktop.Secret.Item"), "GetSecret", "o", (session,), lambda r: r[0][2].decode())
    fd = conn.sock.fileno()
    os.set_inheritable(fd, True)
    arguments = [sys.argv[3], sys.argv[0], command.replace("first", "second"), path, str(fd), before, session]
    if command == "execfirst":
        os.execv(sys.argv[3], arguments)
    # passfirst: a child runs the other program with the connection while this process lives
    # on, until the child says it has made its first call.
    done_read, done_write = os.pipe()
    os.set_inheritable(done_write, True)
    if os.fork() == 0:
        os.execv(sys.argv[3], arguments + [str(done_write)])
    os.close(done_write)
    os.read(done_read, 1)
    os._exit(0)
elif command == "prompts":
    def prompt_of(c):
        return outcome(c, SERVICE, "Unlock", "ao", ([COLLECTIONS["login"]],), lambda r: r[1])
    def show(c, path):
        return outcome(c, address(path, "org.freedesktop.Secret.Prompt"), "Prompt", "s", ("",))
    first = [prompt_of(conn) for _ in range(5)]
    results["Unlock x5, one connection"] = [p if not p.startswith("/") else "prompt" for p in first]
    results["Prompt x4"] = [show(conn, p) for p in first[:4]]
    other = open_dbus_connection(bus="SESSION")
    results["Prompt of another connection"] = show(other, first[0])
    results["Dismiss of another connection"] = outcome(other, address(first[0], "org.freedesktop.Secret.Prompt"), "Dismiss")
    # The owner dismisses it: Completed reaches the owner, not another connection listening.
    completed = MatchRule(type="signal", interface="org.freedesktop.Secret.Prompt", member="Completed")
    Proxy(message_bus, other).AddMatch(completed)
    Proxy(message_bus, conn).AddMatch(completed)
    with other.filter(completed) as theirs, conn.filter(completed) as ours:
        call(conn, address(first[0], "org.freedesktop.Secret.Prompt"), "Dismiss")
        try:
            results["Completed to the owner"] = conn.recv_until_filtered(ours, timeout=5).body[0]
        except TimeoutError:
            results["Completed to the owner"] = "none"
        try:
            other.recv_until_filtered(theirs, timeout=1)
            results["Completed to another"] = "seen"
        except TimeoutError:
            results["Completed to another"] = "none"
    mine = prompt_of(other)
    results["fifth dialog at once"] = show(other, mine)
    connections = [open_dbus_connection(bus="SESSION") for _ in range(16)]
    refused = [p for c in connections for p in [prompt_of(c) for _ in range(4)] if not p.startswith("/")]
    results["Unlock on 16 more connections"] = sorted(set(refused))
elif command == "portal":
    kind = sys.argv[2]
    bus = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
    backend = DBusAddress("/org/freedesktop/portal/desktop", bus_name="org.freedesktop.impl.portal.desktop.keychain",
                          interface="org.freedesktop.impl.portal.Secret")
    assert call(conn, bus, "RequestName", "su", ("org.freedesktop.portal.Desktop", 4))[0] == 1
    read_end, write_end = os.pipe()
    keep = []
    if kind == "fullpipe":
        os.set_blocking(write_end, False)
        try:
            while True:
                os.write(write_end, b"x" * 4096)
        except BlockingIOError:
            pass
        os.set_blocking(write_end, True)
        fd = write_end
    elif kind == "noreader":
        os.close(read_end)
        fd = write_end
    elif kind == "readend":
        fd = read_end
    else:
        handle = tempfile.TemporaryFile()
        keep.append(handle)
        fd = handle.fileno()
    started = time.monotonic()
    try:
        results["response"] = call(conn, backend, "RetrieveSecret", "osha{sv}",
                                   ("/org/freedesktop/portal/desktop/request/1_1/t", "org.example.App", fd, {}), timeout=10)[0]
    except DBusErrorResponse as error:
        results["response"] = error.name
    except TimeoutError:
        results["response"] = "timeout"
    results["seconds"] = time.monotonic() - started
    if kind == "file":
        keep[0].seek(0)
        results["file bytes"] = len(keep[0].read())
    # The bridge still answers others.
    other = open_dbus_connection(bus="SESSION")
    results["after"] = outcome(other, SERVICE, "OpenSession", "sv", ("plain", ("s", "")), lambda r: "ok", timeout=5)
print(json.dumps(results))
