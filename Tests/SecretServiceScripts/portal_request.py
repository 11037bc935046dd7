#!/usr/bin/python3
# Plays xdg-desktop-portal closing a request, for
# Tests/IntegrationTests/SecretServicePortalTests.swift: owns org.freedesktop.portal.Desktop,
# calls RetrieveSecret with a handle, then org.freedesktop.impl.portal.Request.Close on that
# handle twice and once on a handle no call used. Prints one JSON object: the response, and
# for each Close "ok" or the error name.
import json
import os

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusErrorResponse, unwrap_msg

BUS = DBusAddress("/org/freedesktop/DBus", bus_name="org.freedesktop.DBus", interface="org.freedesktop.DBus")
NAME = "org.freedesktop.impl.portal.desktop.keychain"
BACKEND = DBusAddress("/org/freedesktop/portal/desktop", bus_name=NAME, interface="org.freedesktop.impl.portal.Secret")
HANDLE = "/org/freedesktop/portal/desktop/request/1_1/t42"

conn = open_dbus_connection(bus="SESSION", enable_fds=True)
assert unwrap_msg(conn.send_and_get_reply(new_method_call(BUS, "RequestName", "su", ("org.freedesktop.portal.Desktop", 4))))[0] == 1


def close(handle):
    try:
        unwrap_msg(conn.send_and_get_reply(new_method_call(
            DBusAddress(handle, bus_name=NAME, interface="org.freedesktop.impl.portal.Request"), "Close")))
        return "ok"
    except DBusErrorResponse as error:
        return error.name


read_end, write_end = os.pipe()
reply = unwrap_msg(conn.send_and_get_reply(new_method_call(
    BACKEND, "RetrieveSecret", "osha{sv}", (HANDLE, "org.example.One", write_end, {}))))
os.close(write_end)
os.close(read_end)
print(json.dumps({"response": reply[0], "close": close(HANDLE), "again": close(HANDLE),
                  "unknown": close("/org/freedesktop/portal/desktop/request/1_1/never")}))
