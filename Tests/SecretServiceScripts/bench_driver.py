#!/usr/bin/python3
# Times Secret Service servers side by side for keychain-bench --secret-service: each argument
# LABEL=BUS_ADDRESS names a session bus whose org.freedesktop.secrets is one server. Per server:
# ITEMS items preloaded into the default collection, then ROUNDS rounds, the servers taking
# turns within each round so that both see the same machine load:
#   lookup: search_items({"n": k}) + get_secret() on a warm connection and DH session
#   store:  create_item(replace=True) with new attributes
#   floor:  org.freedesktop.DBus.Peer.Ping to org.freedesktop.secrets (what no server can remove)
#   secret-tool: `secret-tool lookup n k`, the whole process (start, libsecret's connection and
#           session, search, secret), as a shell script or a person's command pays it
# Then issue 28's figures, again taking turns:
#   SearchItems, GetSecrets, CreateItem, Ping: the server's time per method as the bus sees it,
#           from `dbus-monitor --profile` on each bus (method return minus method call, matched by
#           the caller's serial: the server's handling plus the bus hops). SearchItems({"n": k}) on
#           the Service, GetSecrets of that one item, CreateItem of a new item into the default
#           collection (each then deleted, by a call not counted, so the item count stays ITEMS),
#           Ping as the floor no server can go below.
#   libsecret: secret_password_lookup_sync({n: k}) from C (BENCH_LOOKUP, built from
#           libsecret_lookup.c by keychain-bench), one warm process per server, call to return.
# Prints one JSON object: {label: {op: {"p50_ms": x, "p90_ms": y}}}.
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import unwrap_msg
from secretstorage.collection import Collection
import secretstorage.util
from secretstorage.util import DBusAddressWrapper, format_secret

ITEMS = int(os.environ.get("BENCH_ITEMS", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "500"))
DEFAULT = "/org/freedesktop/secrets/aliases/default"
PING = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets", interface="org.freedesktop.DBus.Peer")

servers = []
for argument in sys.argv[1:]:
    label, address = argument.split("=", 1)
    conn = open_dbus_connection(bus=address)
    session = secretstorage.util.open_session(conn)
    collection = Collection(conn, DEFAULT, session=session)
    paths = [collection.create_item("bench %d" % n, {"bench": "preload", "n": str(n)}, b"secret %d" % n, replace=True).item_path
             for n in range(ITEMS)]
    servers.append({"label": label, "address": address, "conn": conn, "session": session, "collection": collection,
                    "paths": paths, "env": dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address),
                    "times": {"lookup": [], "store": [], "floor": [], "secret-tool": [], "libsecret": []}})


def timed(server, op, body):
    start = time.perf_counter()
    body()
    server["times"][op].append(time.perf_counter() - start)


for r in range(ROUNDS):
    k = str(random.randrange(ITEMS))
    for server in servers:
        collection = server["collection"]

        def lookup():
            item = next(collection.search_items({"n": k}))
            assert item.get_secret() == b"secret " + k.encode()

        timed(server, "lookup", lookup)
        timed(server, "store", lambda: collection.create_item("stored %d" % r, {"bench": "store", "r": str(r)}, b"v", replace=True))
        timed(server, "floor", lambda: unwrap_msg(server["conn"].send_and_get_reply(new_method_call(PING, "Ping"))))

        def secret_tool():
            found = subprocess.run(["secret-tool", "lookup", "n", k], env=server["env"], capture_output=True, check=True)
            assert found.stdout == b"secret " + k.encode()

        timed(server, "secret-tool", secret_tool)


# Issue 28's server time per method.
SERVICE = "/org/freedesktop/secrets"
MEASURED = ("SearchItems", "GetSecrets", "CreateItem", "Ping")
profile_dir = tempfile.mkdtemp(prefix="ss-profile-")
for server in servers:
    server["profile"] = os.path.join(profile_dir, server["label"] + ".txt")
    out = open(server["profile"], "w")
    server["monitor"] = subprocess.Popen(["dbus-monitor", "--address", server["address"], "--profile"],
                                         stdout=out, stderr=subprocess.DEVNULL)
    out.close()
    # The monitor is in place once it has seen a call of ours.
    deadline = time.monotonic() + 10
    while True:
        unwrap_msg(server["conn"].send_and_get_reply(new_method_call(PING, "Ping")))
        with open(server["profile"]) as f:
            if "\tPing" in f.read():
                break
        if time.monotonic() > deadline:
            sys.exit("dbus-monitor --profile shows nothing on %s" % server["label"])
        time.sleep(0.05)
    server["service"] = DBusAddressWrapper(SERVICE, "org.freedesktop.Secret.Service", server["conn"])
    server["created"] = DBusAddressWrapper(server["collection"].collection_path, "org.freedesktop.Secret.Collection", server["conn"])

for r in range(ROUNDS):
    n = random.randrange(ITEMS)
    for server in servers:
        conn, session = server["conn"], server["session"]
        unlocked, _ = server["service"].call("SearchItems", "a{ss}", {"n": str(n)})
        assert unlocked == [server["paths"][n]], (server["label"], unlocked)
        found = server["service"].call("GetSecrets", "aoo", [server["paths"][n]], session.object_path)[0]
        assert len(found) == 1
        properties = {"org.freedesktop.Secret.Item.Label": ("s", "created %d" % r),
                      "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"bench": "create", "r": str(r)})}
        path, prompt = server["created"].call("CreateItem", "a{sv}(oayays)b", properties,
                                              format_secret(session, b"created", "text/plain"), False)
        assert prompt == "/"
        DBusAddressWrapper(path, "org.freedesktop.Secret.Item", conn).call("Delete", "")
        unwrap_msg(conn.send_and_get_reply(new_method_call(PING, "Ping")))

for server in servers:
    server["monitor"].terminate()
    server["monitor"].wait()
    # "mc TIME SERIAL SENDER DESTINATION PATH INTERFACE MEMBER", then "mr|err TIME SERIAL SENDER
    # DESTINATION IN_REPLY_TO": our calls by their serial, their replies by the serial they answer.
    ours = server["conn"].unique_name
    calls, durations = {}, {member: [] for member in MEASURED}
    with open(server["profile"]) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "mc" and len(fields) >= 8 and fields[3] == ours and fields[7] in durations:
                calls[fields[2]] = (float(fields[1]), fields[7])
            elif fields[0] in ("mr", "err") and len(fields) >= 6 and fields[4] == ours and fields[5] in calls:
                start, member = calls.pop(fields[5])
                durations[member].append(float(fields[1]) - start)
    for member, values in durations.items():
        # The first calls also met the monitor's own start; every server's round count is the same.
        server["times"][member] = values[len(values) // 20:]
shutil.rmtree(profile_dir)

# A libsecret lookup from C, one warm process per server, taking turns.
lookup = os.environ.get("BENCH_LOOKUP")
if lookup:
    for server in servers:
        server["lookup"] = subprocess.Popen([lookup], env=server["env"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            text=True, bufsize=1)
    def ask(server, n):
        server["lookup"].stdin.write("%d\n" % n)
        answer = server["lookup"].stdout.readline().split()
        assert len(answer) == 2 and answer[1] == str(len(b"secret %d" % n)), (server["label"], answer)
        return float(answer[0]) / 1e6
    for server in servers:
        ask(server, 0)
    for r in range(ROUNDS):
        n = random.randrange(ITEMS)
        for server in servers:
            server["times"]["libsecret"].append(ask(server, n))
    for server in servers:
        server["lookup"].stdin.close()
        server["lookup"].wait()


def percentile(values, p):
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * p))] * 1000, 4)


print(json.dumps({s["label"]: {op: {"p50_ms": percentile(t, 0.5), "p90_ms": percentile(t, 0.9)}
                               for op, t in s["times"].items() if t} for s in servers}, indent=1))
