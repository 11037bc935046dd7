#!/usr/bin/python3
# The four calls that carry a secret through the bridge, for
# Tests/IntegrationTests/SecretServiceMemoryTests.swift: CreateItem, GetSecret, SetSecret and
# GetSecrets, in COLLECTION (login|session) with a session of ALGORITHM (plain|dh), each secret
# holding MARKER. Arguments: ALGORITHM COLLECTION MARKER. Prints {"ok": true}; a failed
# assertion exits non-zero.
import json
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import unwrap_msg
import secretstorage
from secretstorage.collection import Collection
from secretstorage.dhcrypto import Session
import secretstorage.util

SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                      interface="org.freedesktop.Secret.Service")
PATHS = {"login": "/org/freedesktop/secrets/collection/login",
         "session": "/org/freedesktop/secrets/collection/session"}

algorithm, name, marker = sys.argv[1], sys.argv[2], sys.argv[3].encode()
conn = secretstorage.dbus_init()
if algorithm == "dh":
    session = secretstorage.util.open_session(conn)
    assert session.encrypted
else:
    session = Session()
    session.encrypted = False
    reply = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "OpenSession", "sv", ("plain", ("s", "")))))
    session.object_path = reply[1]
collection = Collection(conn, PATHS[name], session=session)
item = collection.create_item("memory", {"test": "memory"}, b"first " + marker + b" end")
assert item.get_secret() == b"first " + marker + b" end"
item.set_secret(b"second " + marker + b" end")
found, = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "GetSecrets", "aoo", ([item.item_path], session.object_path))))
assert list(found) == [item.item_path], found
if algorithm == "plain":
    assert bytes(found[item.item_path][2]) == b"second " + marker + b" end"
item.delete()
print(json.dumps({"ok": True}))
