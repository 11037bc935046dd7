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
# Prints one JSON object: {label: {op: {"p50_ms": x, "p90_ms": y}}}.
import json
import os
import random
import subprocess
import sys
import time

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import unwrap_msg
from secretstorage.collection import Collection
import secretstorage.util

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
    for n in range(ITEMS):
        collection.create_item("bench %d" % n, {"bench": "preload", "n": str(n)}, b"secret %d" % n, replace=True)
    servers.append({"label": label, "conn": conn, "collection": collection,
                    "env": dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address),
                    "times": {"lookup": [], "store": [], "floor": [], "secret-tool": []}})


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


def percentile(values, p):
    values = sorted(values)
    return round(values[min(len(values) - 1, int(len(values) * p))] * 1000, 3)


print(json.dumps({s["label"]: {op: {"p50_ms": percentile(t, 0.5), "p90_ms": percentile(t, 0.9)}
                               for op, t in s["times"].items()} for s in servers}, indent=1))
