#!/usr/bin/python3
# Lock and Unlock through python3-secretstorage, for Tests/IntegrationTests/SecretServiceLockTests.swift.
# Prints one JSON object.
#   create                -> {"path": p}: an item with attribute locking=test
#   observe PATH          -> {"locked": login's Locked, "unlocked": [...], "lockedItems": [...],
#                             "lockedByPair": locked items found by locking=test,
#                             "secret": "ok" or the D-Bus error of GetSecret}
#   unlock                -> {"dismissed": b, "result": [...]} from Unlock and its prompt, or
#                            {"error": name, "message": text}
#   lock                  -> {"locked": [...]} from Service.Lock([login])
import json
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.wrappers import DBusErrorResponse, unwrap_msg
import secretstorage
from secretstorage.collection import Collection
from secretstorage.item import Item
from secretstorage.util import exec_prompt

SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                      interface="org.freedesktop.Secret.Service")
LOGIN = "/org/freedesktop/secrets/collection/login"

conn = secretstorage.dbus_init()
command = sys.argv[1]
if command == "create":
    item = Collection(conn, LOGIN).create_item("lockable", {"locking": "test"}, b"behind the lock")
    result = {"path": item.item_path}
elif command == "observe":
    collection = Collection(conn, LOGIN)
    unlocked, locked = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "SearchItems", "a{ss}", ({},))))
    by_pair = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "SearchItems", "a{ss}", ({"locking": "test"},))))
    try:
        Item(conn, sys.argv[2]).get_secret()
        secret = "ok"
    except secretstorage.exceptions.LockedException:
        secret = "org.freedesktop.Secret.Error.IsLocked"
    except DBusErrorResponse as error:
        secret = error.name
    result = {"locked": collection.is_locked(), "unlocked": unlocked, "lockedItems": locked, "secret": secret,
              "lockedByPair": by_pair[1]}
elif command == "unlock":
    try:
        unlocked, prompt = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "Unlock", "ao", ([LOGIN],))))
        if prompt == "/":
            result = {"dismissed": False, "result": unlocked, "prompted": False}
        else:
            dismissed, (signature, value) = exec_prompt(conn, prompt)
            result = {"dismissed": dismissed, "result": value, "prompted": True}
    except DBusErrorResponse as error:
        result = {"error": error.name, "message": str(error.data[0]) if error.data else ""}
elif command == "lock":
    locked, prompt = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "Lock", "ao", ([LOGIN],))))
    result = {"locked": locked, "prompt": prompt}
print(json.dumps(result))
