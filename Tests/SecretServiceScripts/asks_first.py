#!/usr/bin/python3
# Items that ask first through python3-secretstorage, for
# Tests/IntegrationTests/SecretServiceAsksFirstTests.swift. Prints one JSON object.
#   create              -> {"path": p}: an item with attribute asks=first, secret "asked for"
#   search              -> {"unlocked": [...], "locked": [...]}: SearchItems of asks=first
#   observe PATH        -> {"unlocked": [...], "locked": [...] (SearchItems of asks=first),
#                           "itemLocked": its Locked, "getSecret": "ok" or the D-Bus error of a
#                           plain GetSecret, "getSecrets": how many secrets GetSecrets gave}
#   unlock-read PATH    -> {"unlocked": [...] (Unlock's own answer), "prompted": b, "dismissed": b,
#                           "result": [...] (Completed's), "secret": the secret read then with
#                           secretstorage or the error, "again": a second GetSecret's outcome}
import json
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.wrappers import DBusErrorResponse, unwrap_msg
import secretstorage
from secretstorage.collection import Collection
from secretstorage.item import Item
from secretstorage.util import exec_prompt, open_session

SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                      interface="org.freedesktop.Secret.Service")
LOGIN = "/org/freedesktop/secrets/collection/login"

conn = secretstorage.dbus_init()
session = open_session(conn)
command = sys.argv[1]


def call(address, member, signature, *body):
    return unwrap_msg(conn.send_and_get_reply(new_method_call(address, member, signature, body)))


def raw_get_secret(path):
    item = DBusAddress(path, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Item")
    try:
        call(item, "GetSecret", "o", session.object_path)
        return "ok"
    except DBusErrorResponse as error:
        return error.name


if command == "create":
    item = Collection(conn, LOGIN, session=session).create_item("asks first", {"asks": "first"}, b"asked for")
    result = {"path": item.item_path}
elif command == "search":
    unlocked, locked = call(SERVICE, "SearchItems", "a{ss}", {"asks": "first"})
    result = {"unlocked": unlocked, "locked": locked}
elif command == "observe":
    path = sys.argv[2]
    unlocked, locked = call(SERVICE, "SearchItems", "a{ss}", {"asks": "first"})
    secrets = call(SERVICE, "GetSecrets", "aoo", [path], session.object_path)[0]
    result = {"unlocked": unlocked, "locked": locked, "itemLocked": Item(conn, path).is_locked(),
              "getSecret": raw_get_secret(path), "getSecrets": len(secrets)}
elif command == "unlock-read":
    path = sys.argv[2]
    unlocked, prompt = call(SERVICE, "Unlock", "ao", [path])
    result = {"unlocked": unlocked, "prompted": prompt != "/"}
    if prompt != "/":
        dismissed, (signature, value) = exec_prompt(conn, prompt)
        result.update({"dismissed": dismissed, "result": value})
    try:
        item = Item(conn, path, session=session)
        result["secret"] = item.get_secret().decode()
    except secretstorage.exceptions.LockedException:
        result["secret"] = "org.freedesktop.Secret.Error.IsLocked"
    except DBusErrorResponse as error:
        result["secret"] = error.name
    result["again"] = raw_get_secret(path)
else:
    sys.exit("unknown command " + command)
print(json.dumps(result))
