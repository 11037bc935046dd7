#!/usr/bin/python3
# Collections a client creates, through python3-secretstorage, for
# Tests/IntegrationTests/SecretServiceCollectionTests.swift. Each command asserts what a client
# relies on and prints one JSON object; a failed assertion exits non-zero with its traceback.
#   lifecycle               -> create "Work", list it, store into it and into login, search in
#                              each and in the service, relabel, delete it with its item; the
#                              login collection cannot be deleted
#   create LABEL [ALIAS]    -> {"path": p}: a new collection (or the alias's, if it exists)
#   fill N                  -> {"made": collections made before a CreateCollection failed (at most
#                              N), "error": that D-Bus error or null}
#   store PATH NAME         -> {"path": p}: an item with owner=NAME in the collection at PATH
#   delete PATH             -> {}: Collection.Delete of PATH
#   locked PATH NAME        -> {"collection": its Locked, "locked": locked items with owner=NAME
#                              (Service.SearchItems), "secret": the D-Bus error of their GetSecret}
#   set-alias NAME PATH     -> {}: SetAlias(NAME, PATH) ("/" clears)
#   set-label PATH LABEL    -> {"error": the D-Bus error of Set(Label) on the collection at PATH,
#                              or null}
#   probe PATH NAME         -> what this process sees: {"listed": PATH in Collections,
#                              "label": its Label or the D-Bus error, "search": items with
#                              owner=NAME in it or the D-Bus error, "default": ReadAlias(default),
#                              "everywhere": Service.SearchItems owner=NAME}
import json
import sys

from jeepney.wrappers import DBusErrorResponse
import secretstorage
from secretstorage.collection import Collection
from secretstorage.collection import SERVICE_IFACE
from secretstorage.defines import SS_PATH
from secretstorage.exceptions import ItemNotFoundException
from secretstorage.item import Item
import secretstorage.util
from secretstorage.util import DBusAddressWrapper

LOGIN = "/org/freedesktop/secrets/collection/login"


def service(conn):
    return DBusAddressWrapper(SS_PATH, SERVICE_IFACE, conn)


def dbus_error(body):
    """body's value, or the name of the D-Bus error it ended with."""
    try:
        return body()
    except ItemNotFoundException as error:
        return error.__cause__.name
    except DBusErrorResponse as error:
        return error.name


def lifecycle():
    conn = secretstorage.dbus_init()
    work = secretstorage.create_collection(conn, "Work")
    path = work.collection_path
    assert path.startswith("/org/freedesktop/secrets/collection/c"), path
    assert path in [c.collection_path for c in secretstorage.get_all_collections(conn)]
    assert work.get_label() == "Work"
    assert not work.is_locked()
    assert work.get_all_items() is not None and list(work.get_all_items()) == []

    attributes = {"service": "mail", "user": "alice"}
    inside = work.create_item("in work", attributes, b"work secret")
    assert inside.item_path.startswith(path + "/"), inside.item_path
    login = Collection(conn, LOGIN)
    outside = login.create_item("in login", attributes, b"login secret")
    assert [i.item_path for i in work.search_items(attributes)] == [inside.item_path]
    assert [i.item_path for i in login.search_items(attributes)] == [outside.item_path]
    everywhere = sorted(i.item_path for i in secretstorage.search_items(conn, attributes))
    assert everywhere == sorted([inside.item_path, outside.item_path]), everywhere
    assert inside.get_secret() == b"work secret" and inside.get_label() == "in work"
    assert [i.item_path for i in work.get_all_items()] == [inside.item_path]
    # An item is reached through its own collection only.
    alien = inside.item_path.replace(path, LOGIN)
    missed, = service(conn).call("GetSecrets", "aoo", [alien], work.session.object_path)
    assert missed == {}, missed

    work.set_label("Work, renamed")
    assert work.get_label() == "Work, renamed"
    assert Collection(conn, path).get_label() == "Work, renamed"

    refused = dbus_error(lambda: login._collection.call("Delete", ""))
    assert refused == "org.freedesktop.DBus.Error.NotSupported", refused
    work.delete()
    assert path not in [c.collection_path for c in secretstorage.get_all_collections(conn)]
    gone = dbus_error(lambda: Collection(conn, path))
    assert gone == "org.freedesktop.Secret.Error.NoSuchObject", gone
    assert [i.item_path for i in secretstorage.search_items(conn, attributes)] == [outside.item_path]
    assert outside.get_secret() == b"login secret"
    print(json.dumps({"path": path}))


def main():
    command = sys.argv[1]
    conn = secretstorage.dbus_init()
    if command == "lifecycle":
        lifecycle()
    elif command == "create":
        alias = sys.argv[3] if len(sys.argv) > 3 else ""
        print(json.dumps({"path": secretstorage.create_collection(conn, sys.argv[2], alias).collection_path}))
    elif command == "fill":
        made, error = 0, None
        for n in range(int(sys.argv[2])):
            error = dbus_error(lambda: service(conn).call("CreateCollection", "a{sv}s", {}, "") and None)
            if error is not None:
                break
            made += 1
        print(json.dumps({"made": made, "error": error}))
    elif command == "store":
        collection = Collection(conn, sys.argv[2])
        item = collection.create_item("stored", {"owner": sys.argv[3]}, b"ok")
        print(json.dumps({"path": item.item_path}))
    elif command == "delete":
        Collection(conn, sys.argv[2]).delete()
        print(json.dumps({}))
    elif command == "locked":
        path, name = sys.argv[2], sys.argv[3]
        collection = Collection(conn, path)
        unlocked, locked = service(conn).call("SearchItems", "a{ss}", {"owner": name})
        session = secretstorage.util.open_session(conn)
        # Item.get_secret checks Locked itself first; the bridge's own answer is wanted here.
        secret = dbus_error(lambda: [Item(conn, p)._item.call("GetSecret", "o", session.object_path) for p in locked] and "ok")
        print(json.dumps({"collection": collection.is_locked(), "locked": locked, "secret": secret}))
    elif command == "set-alias":
        service(conn).call("SetAlias", "so", sys.argv[2], sys.argv[3])
        print(json.dumps({}))
    elif command == "set-label":
        error = dbus_error(lambda: Collection(conn, sys.argv[2]).set_label(sys.argv[3]))
        print(json.dumps({"error": error}))
    elif command == "probe":
        path, name = sys.argv[2], sys.argv[3]
        listed = path in service(conn).get_property("Collections")
        label = dbus_error(lambda: Collection(conn, path).get_label())
        search = dbus_error(lambda: [i.item_path for i in Collection(conn, path).search_items({"owner": name})])
        default, = service(conn).call("ReadAlias", "s", "default")
        everywhere = sorted(i.item_path for i in secretstorage.search_items(conn, {"owner": name}))
        print(json.dumps({"listed": listed, "label": label, "search": search, "default": default, "everywhere": everywhere}))
    else:
        sys.exit("unknown command " + command)


main()
