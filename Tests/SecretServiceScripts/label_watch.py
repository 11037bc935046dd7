#!/usr/bin/python3
# Reads an item's Label through the bridge on one connection, for
# Tests/IntegrationTests/SecretServiceCollectionTests.swift (the bridge's read cache): prints
# "ready" once it has read the label, waits for a line on stdin (the test changed the label
# outside the bridge meanwhile), then reads Label every 20 ms until it is EXPECTED or SECONDS
# pass, and prints {"elapsed": seconds from the line to the new label, or null, "since_first_read":
# seconds from before its first read of the item (no cache entry of this connection can be
# older) to the new label, or null}.
import json
import sys
import time

import secretstorage
from secretstorage.item import Item

path, expected, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
conn = secretstorage.dbus_init()
first_read = time.monotonic()
item = Item(conn, path)
assert item.get_label() != expected
print("ready", flush=True)
sys.stdin.readline()
start = time.monotonic()
elapsed = since_first_read = None
while time.monotonic() - start < seconds:
    if item.get_label() == expected:
        now = time.monotonic()
        elapsed, since_first_read = now - start, now - first_read
        break
    time.sleep(0.02)
print(json.dumps({"elapsed": elapsed, "since_first_read": since_first_read}), flush=True)
