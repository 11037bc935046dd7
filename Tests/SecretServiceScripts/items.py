#!/usr/bin/python3
# python3-secretstorage against the Secret Service under test, for
# Tests/IntegrationTests/SecretServiceItemTests.swift. Each command asserts what a client relies
# on and prints one JSON object; a failed assertion exits non-zero with its traceback.
#   lifecycle ALGORITHM COLLECTION  -> create, search by every subset of 3 attributes, get,
#                                      content type, replace, set label and attributes, delete
#                                      (ALGORITHM dh|plain; COLLECTION default|login|session)
#   create COLLECTION NAME          -> {"path": p}: an item with attribute owner=NAME
#   probe PATH NAME                 -> what this process sees: {"search": [paths of owner=NAME],
#                                      "secret": "ok" or the D-Bus error of GetSecret on PATH}
#   signals                         -> creates, relabels and deletes an item in login: {"path": p}
#   label PATH                      -> {"label": the Label of the item at PATH}
import itertools
import json
import sys

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusErrorResponse, unwrap_msg
import secretstorage
from secretstorage.collection import Collection
from secretstorage.dhcrypto import Session
from secretstorage.exceptions import ItemNotFoundException
from secretstorage.item import Item
import secretstorage.util

SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                      interface="org.freedesktop.Secret.Service")
PATHS = {"default": "/org/freedesktop/secrets/aliases/default",
         "login": "/org/freedesktop/secrets/collection/login",
         "session": "/org/freedesktop/secrets/collection/session"}


def session_for(conn, algorithm):
    if algorithm == "dh":
        session = secretstorage.util.open_session(conn)
        assert session.encrypted
        return session
    session = Session()
    session.encrypted = False
    reply = unwrap_msg(conn.send_and_get_reply(new_method_call(SERVICE, "OpenSession", "sv", ("plain", ("s", ""))))) 
    session.object_path = reply[1]
    return session


def lifecycle(algorithm, name):
    conn = secretstorage.dbus_init()
    collection = Collection(conn, PATHS[name], session=session_for(conn, algorithm))
    attributes = {"a": "1", "b": "2", "c": "3"}
    item = collection.create_item("first label", attributes, b"s3cret", content_type="application/x-test")
    path = item.item_path
    canonical = path.replace(PATHS["default"], PATHS["login"])
    assert canonical.startswith(PATHS["login" if name != "session" else "session"] + "/"), path

    for size in range(0, 4):
        for subset in itertools.combinations(sorted(attributes), size):
            query = {k: attributes[k] for k in subset}
            found = [i.item_path for i in collection.search_items(query)]
            assert canonical in found, (query, found)
            everywhere = [i.item_path for i in secretstorage.search_items(conn, query)]
            assert canonical in everywhere, (query, everywhere)
    assert [i for i in collection.search_items({"a": "1", "b": "other"})] == []

    item = Item(conn, canonical, session=collection.session)
    assert item.get_secret() == b"s3cret"
    assert item.get_secret_content_type() == "application/x-test"
    assert item.get_label() == "first label"
    assert item.get_attributes() == dict(attributes, **{"xdg:schema": "org.freedesktop.Secret.Generic"})
    assert not item.is_locked()
    assert item.get_created() > 0 and item.get_modified() >= item.get_created()

    # Replace: the same attributes (xdg:schema included) rewrite the one item.
    again = collection.create_item("second label", attributes, b"replaced", replace=True)
    assert again.item_path.replace(PATHS["default"], PATHS["login"]) == canonical, (again.item_path, canonical)
    assert [i.item_path for i in collection.search_items(attributes)] == [canonical]
    assert item.get_secret() == b"replaced" and item.get_label() == "second label"
    assert item.get_secret_content_type() == "text/plain"
    # Without replace, the same attributes make a second item.
    other = collection.create_item("other", attributes, b"")
    assert other.get_secret() == b""
    assert len(list(collection.search_items(attributes))) == 2
    other.delete()

    item.set_label("relabelled")
    assert item.get_label() == "relabelled"
    item.set_attributes({"a": "1", "d": "4"})
    assert item.get_attributes() == {"a": "1", "d": "4"}
    assert [i.item_path for i in collection.search_items({"d": "4"})] == [canonical]
    assert list(collection.search_items({"b": "2"})) == []
    item.set_secret(b"set again", content_type="text/x-again")
    assert item.get_secret() == b"set again" and item.get_secret_content_type() == "text/x-again"

    secrets = unwrap_msg(conn.send_and_get_reply(new_method_call(
        SERVICE, "GetSecrets", "aoo", ([canonical, PATHS["login"] + "/00000000000000000000000000000000"], collection.session.object_path))))[0]
    assert list(secrets) == [canonical], secrets

    item.delete()
    assert list(collection.search_items({"a": "1"})) == []
    try:
        item.get_secret()
        raise AssertionError("a deleted item still has a secret")
    except ItemNotFoundException:
        pass
    return {"path": canonical}


def create(name, owner):
    conn = secretstorage.dbus_init()
    collection = Collection(conn, PATHS[name])
    item = collection.create_item("owned by " + owner, {"owner": owner}, owner.encode())
    return {"path": item.item_path}


def probe(path, owner):
    conn = secretstorage.dbus_init()
    found = [i.item_path for i in secretstorage.search_items(conn, {"owner": owner})]
    try:
        Item(conn, path).get_secret()
        outcome = "ok"
    except ItemNotFoundException:
        outcome = "org.freedesktop.Secret.Error.NoSuchObject"
    except DBusErrorResponse as error:
        outcome = error.name
    return {"search": found, "secret": outcome}


def signals():
    conn = secretstorage.dbus_init()
    collection = Collection(conn, PATHS["login"])
    item = collection.create_item("watched", {"watched": "yes"}, b"x")
    item.set_label("watched again")
    item.delete()
    return {"path": item.item_path}


def label(path):
    return {"label": Item(secretstorage.dbus_init(), path).get_label()}


command = sys.argv[1]
if command == "lifecycle":
    result = lifecycle(sys.argv[2], sys.argv[3])
elif command == "create":
    result = create(sys.argv[2], sys.argv[3])
elif command == "probe":
    result = probe(sys.argv[2], sys.argv[3])
elif command == "signals":
    result = signals()
elif command == "label":
    result = label(sys.argv[2])
print(json.dumps(result))
