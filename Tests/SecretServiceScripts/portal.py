#!/usr/bin/python3
# Plays xdg-desktop-portal against the bridge's portal backend, for
# Tests/IntegrationTests/SecretServicePortalTests.swift. Arguments: "claim" or "noclaim" (whether
# to own org.freedesktop.portal.Desktop first), or "claim-gnome" (claim, then call the backend at
# org.freedesktop.secrets, as gnome-keyring.portal has xdg-desktop-portal do), then app ids. For each app id it calls
# RetrieveSecret with a pipe and prints one JSON list of {"response": u, "secret": hex} or
# {"error": name}.
import json
import os
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusErrorResponse, unwrap_msg

BUS = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
BACKEND = DBusAddress("/org/freedesktop/portal/desktop", bus_name="org.freedesktop.impl.portal.desktop.keychain",
                      interface="org.freedesktop.impl.portal.Secret")

if sys.argv[1] == "claim-gnome":
    BACKEND = DBusAddress("/org/freedesktop/portal/desktop", bus_name="org.freedesktop.secrets",
                          interface="org.freedesktop.impl.portal.Secret")
conn = open_dbus_connection(bus="SESSION", enable_fds=True)
if sys.argv[1] in ("claim", "claim-gnome"):
    answer = unwrap_msg(conn.send_and_get_reply(new_method_call(BUS, "RequestName", "su", ("org.freedesktop.portal.Desktop", 4))))[0]
    assert answer == 1, answer
results = []
for app_id in sys.argv[2:]:
    read_end, write_end = os.pipe()
    try:
        reply = unwrap_msg(conn.send_and_get_reply(new_method_call(
            BACKEND, "RetrieveSecret", "osha{sv}", ("/org/freedesktop/portal/desktop/request/1_1/t", app_id, write_end, {}))))
        os.close(write_end)
        secret = b""
        while True:
            chunk = os.read(read_end, 4096)
            if not chunk:
                break
            secret += chunk
        results.append({"response": reply[0], "secret": secret.hex()})
    except DBusErrorResponse as error:
        os.close(write_end)
        results.append({"error": error.name})
    os.close(read_end)
print(json.dumps(results))
