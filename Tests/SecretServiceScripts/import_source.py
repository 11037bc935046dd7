#!/usr/bin/python3
# The provider side of an import (Tests/IntegrationTests/SecretServiceImportTests.swift), through
# python3-secretstorage against whatever owns org.freedesktop.secrets on the session bus.
#   fill    -> {}: four items in login (two with one attribute set) and a collection "Work"
#              with one item, made through gnome-keyring's own prompt-less CreateWithMasterPassword
#              Every item names its schema, as libsecret's clients do: gnome-keyring gives
#              an item without one xdg:schema=org.freedesktop.Secret.Generic when it reloads
#              the keyring file, which would change attribute sets under a test's feet.
#   change  -> {}: a new secret for login's item service=mail
#   retag   -> {}: a new attribute value (user) for login's item service=mail
#   dump    -> {"items": [...]}: every item of every collection but session, sorted, as
#              {collection: "login" or its label, label, attributes, secret (latin-1 text),
#              content_type, created, modified}
import json
import sys

import secretstorage
from secretstorage.collection import Collection
from secretstorage.defines import SS_PATH
from secretstorage.util import DBusAddressWrapper

SERVICE_IFACE = "org.freedesktop.Secret.Service"


def login(connection):
    return Collection(connection, SS_PATH + "/collection/login")


GENERIC = {"xdg:schema": "org.freedesktop.Secret.Generic"}


def fill(connection):
    mine = login(connection)
    mine.create_item("Mail", {"service": "mail", "user": "alice", **GENERIC}, b"mail-secret-1")
    mine.create_item("Binary", {"service": "web", **GENERIC}, bytes(range(256)), content_type="application/octet-stream")
    mine.create_item("First of two", {"app": "dup", **GENERIC}, b"dup-one")
    mine.create_item("Second of two", {"app": "dup", **GENERIC}, b"dup-two")
    service = DBusAddressWrapper(SS_PATH, SERVICE_IFACE, connection)
    _, session = service.call("OpenSession", "sv", "plain", ("s", ""))
    internal = DBusAddressWrapper(SS_PATH, "org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface", connection)
    (path,) = internal.call("CreateWithMasterPassword", "a{sv}(oayays)",
                            {"org.freedesktop.Secret.Collection.Label": ("s", "Work")},
                            (session, b"", b"work-keyring-password", "text/plain"))
    Collection(connection, path).create_item("Work VPN", {"service": "vpn", **GENERIC}, b"work-secret")
    return {}


def change(connection):
    for item in login(connection).search_items({"service": "mail"}):
        item.set_secret(b"mail-secret-2")
    return {}


def retag(connection):
    for item in login(connection).search_items({"service": "mail"}):
        item.set_attributes({"service": "mail", "user": "alice@example.org", **GENERIC})
    return {}


def dump(connection):
    items = []
    for collection in secretstorage.get_all_collections(connection):
        path = collection.collection_path
        if path.endswith("/collection/session"):
            continue
        name = "login" if path.endswith("/collection/login") else collection.get_label()
        collection.unlock()
        for item in collection.get_all_items():
            items.append({"collection": name, "label": item.get_label(), "attributes": item.get_attributes(),
                          "secret": item.get_secret().decode("latin-1"), "content_type": item.get_secret_content_type(),
                          "created": item.get_created(), "modified": item.get_modified()})
    items.sort(key=lambda i: (i["collection"], i["label"]))
    return {"items": items}


connection = secretstorage.dbus_init()
print(json.dumps({"fill": fill, "change": change, "retag": retag, "dump": dump}[sys.argv[1]](connection)))
