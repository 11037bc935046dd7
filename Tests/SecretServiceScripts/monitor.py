#!/usr/bin/python3
# Watches the signals org.freedesktop.secrets broadcasts, for
# Tests/IntegrationTests/SecretServiceItemTests.swift: prints "ready" once subscribed, then one
# line "INTERFACE.MEMBER PATH FIRST-ARGUMENT" per signal, and exits after ItemDeleted or 20 s.
from jeepney import DBusAddress, MatchRule, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection
from jeepney.low_level import HeaderFields

conn = open_dbus_connection(bus="SESSION")
conn.send_and_get_reply(message_bus.AddMatch(MatchRule(type="signal", sender="org.freedesktop.secrets")))
print("ready", flush=True)
# The bus stamps signals with the owner's unique name, so the local filter goes by path.
with conn.filter(MatchRule(type="signal", path_namespace="/org/freedesktop/secrets")) as queue:
    while True:
        try:
            message = conn.recv_until_filtered(queue, timeout=20)
        except TimeoutError:
            break
        header = message.header.fields
        interface = header[HeaderFields.interface]
        member = header[HeaderFields.member]
        path = header[HeaderFields.path]
        first = message.body[0] if message.body else ""
        print("%s.%s %s %s" % (interface, member, path, first), flush=True)
        if member == "ItemDeleted":
            break
