#!/usr/bin/python3
# Owns org.freedesktop.secrets on the test's bus, as gnome-keyring would, for
# Tests/IntegrationTests/SecretServiceSessionTests.swift. Argument "allow" lets another
# connection replace it. Prints "ready UNIQUE PID" once it owns the name, then "lost" if it
# loses it (within 60 s); exits on either, or when standard input closes.
import os
import sys

from jeepney import DBusAddress, MatchRule, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import unwrap_msg

BUS = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
ALLOW_REPLACEMENT, DO_NOT_QUEUE = 0x1, 0x4

conn = open_dbus_connection(bus="SESSION")
flags = DO_NOT_QUEUE | (ALLOW_REPLACEMENT if sys.argv[1:] == ["allow"] else 0)
answer = unwrap_msg(conn.send_and_get_reply(new_method_call(BUS, "RequestName", "su", ("org.freedesktop.secrets", flags))))[0]
if answer != 1:
    print("not owner", answer, flush=True)
    sys.exit(1)
print("ready", conn.unique_name, os.getpid(), flush=True)
rule = MatchRule(type="signal", sender="org.freedesktop.DBus", interface="org.freedesktop.DBus", member="NameLost")
with conn.filter(rule) as queue:
    try:
        conn.recv_until_filtered(queue, timeout=60)
        print("lost", flush=True)
    except TimeoutError:
        pass
