#!/usr/bin/python3
# Watches what org.freedesktop.secrets broadcasts, for
# Tests/IntegrationTests/SecretServiceChangeFeedTests.swift: prints "ready" once subscribed,
# then one line per signal, "INTERFACE.MEMBER PATH FIRST-ARGUMENT", followed for
# PropertiesChanged by the changed and the invalidated property names. Exits after COUNT
# signals or SECONDS seconds, whichever comes first.
import sys
import time

from jeepney import MatchRule
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection
from jeepney.low_level import HeaderFields

seconds, count = float(sys.argv[1]), int(sys.argv[2])
conn = open_dbus_connection(bus="SESSION")
conn.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", sender="org.freedesktop.secrets")))
print("ready", flush=True)
end = time.monotonic() + seconds
seen = 0
# The bus stamps signals with the owner's unique name, so the local filter goes by path.
with conn.filter(MatchRule(type="signal", path_namespace="/org/freedesktop/secrets")) as queue:
    while seen < count:
        left = end - time.monotonic()
        if left <= 0:
            break
        try:
            message = conn.recv_until_filtered(queue, timeout=left)
        except TimeoutError:
            break
        header = message.header.fields
        line = "%s.%s %s %s" % (header[HeaderFields.interface], header[HeaderFields.member],
                                header[HeaderFields.path], message.body[0] if message.body else "")
        if header[HeaderFields.member] == "PropertiesChanged":
            line += " changed=%s invalidated=%s" % (",".join(sorted(message.body[1])), ",".join(message.body[2]))
        print(line, flush=True)
        seen += 1
