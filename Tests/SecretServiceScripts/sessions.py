#!/usr/bin/python3
# Opens Secret Service sessions the ways clients do and the ways they must not, for
# Tests/IntegrationTests/SecretServiceSessionTests.swift. Prints one JSON object.
#   open   -> {"dh": path, "plain": path}: secretstorage's own DH session, and a plain one
#   edge   -> {case: "ok" or the D-Bus error name} for the edge cases below
#   leave  -> opens two sessions, prints {"sessions": [paths]} and exits (its connection goes)
#   transfer -> {case: "ok" or the D-Bus error} for CreateItem with secrets sealed well and badly
#   try    -> {"open": "ok" or the D-Bus error}: one OpenSession (run as another uid)
#   orphan -> connects, forks and exits; the child calls OpenSession on the inherited
#             connection once its parent is gone: {"open": ..., "message": ...}
#   zombie -> a child of this script connects, calls once (the bridge knows it), forks and
#             exits, left unreaped by this script (a zombie); its child calls OpenSession on
#             the inherited connection: {"before": ..., "open": ..., "message": ...}
import json
import os
import sys
import time

from jeepney import DBusAddress, new_method_call
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusErrorResponse, unwrap_msg
from secretstorage.dhcrypto import DH_PRIME_1024, int_to_bytes
import secretstorage
import secretstorage.util

SERVICE = DBusAddress("/org/freedesktop/secrets", bus_name="org.freedesktop.secrets",
                      interface="org.freedesktop.Secret.Service")
DH = "dh-ietf1024-sha256-aes128-cbc-pkcs7"


def call(conn, address, member, signature=None, body=()):
    return unwrap_msg(conn.send_and_get_reply(new_method_call(address, member, signature, body)))


def outcome(conn, address, member, signature=None, body=()):
    try:
        call(conn, address, member, signature, body)
        return "ok"
    except DBusErrorResponse as error:
        return error.name


def open_session(conn, algorithm, value):
    return call(conn, SERVICE, "OpenSession", "sv", (algorithm, value))[1]


def session_address(path):
    return DBusAddress(path, bus_name="org.freedesktop.secrets", interface="org.freedesktop.Secret.Session")


command = sys.argv[1]
if command == "zombie":
    done_read, done_write = os.pipe()
    if os.fork() != 0:
        # Never waits for its child, which stays a zombie once it exits, until this ends.
        os.close(done_write)
        os.read(done_read, 1)
        sys.exit(0)
    conn = open_dbus_connection(bus="SESSION")
    before = outcome(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
    opener = os.getpid()
    if os.fork() != 0:
        os._exit(0)
    for _ in range(1000):
        with open("/proc/%d/stat" % opener) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    try:
        call(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
        answer = {"open": "ok", "message": ""}
    except DBusErrorResponse as error:
        answer = {"open": error.name, "message": str(error.data[0]) if error.data else ""}
    print(json.dumps(dict(answer, before=before)), flush=True)
    os.write(done_write, b"x")
    os._exit(0)
conn = open_dbus_connection(bus="SESSION")
if command == "open":
    session = secretstorage.util.open_session(conn)
    assert session.encrypted and len(session.aes_key) == 16
    plain = open_session(conn, "plain", ("s", ""))
    print(json.dumps({"dh": session.object_path, "plain": plain}))
elif command == "edge":
    results = {}
    results["unknown algorithm"] = outcome(conn, SERVICE, "OpenSession", "sv", ("rot13", ("s", "")))
    results["empty public value"] = outcome(conn, SERVICE, "OpenSession", "sv", (DH, ("ay", b"")))
    results["public value 1"] = outcome(conn, SERVICE, "OpenSession", "sv", (DH, ("ay", b"\x01")))
    results["public value p-1"] = outcome(conn, SERVICE, "OpenSession", "sv", (DH, ("ay", int_to_bytes(DH_PRIME_1024 - 1))))
    results["129-byte public value"] = outcome(conn, SERVICE, "OpenSession", "sv", (DH, ("ay", b"\x02" * 129)))
    results["string for DH"] = outcome(conn, SERVICE, "OpenSession", "sv", (DH, ("s", "")))
    results["1-byte public value"] = outcome(conn, SERVICE, "OpenSession", "sv", (DH, ("ay", b"\x02")))
    mine = open_session(conn, "plain", ("s", ""))
    other = open_dbus_connection(bus="SESSION")
    results["close by another connection"] = outcome(other, session_address(mine), "Close")
    results["close by its own"] = outcome(conn, session_address(mine), "Close")
    results["close twice"] = outcome(conn, session_address(mine), "Close")
    for _ in range(16):
        open_session(other, "plain", ("s", ""))
    results["seventeenth session"] = outcome(other, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
    results["wrong arguments"] = outcome(conn, SERVICE, "OpenSession", "ss", ("plain", ""))
    results["no arguments"] = outcome(conn, SERVICE, "SearchItems")
    login = DBusAddress("/org/freedesktop/secrets/collection/login", bus_name="org.freedesktop.secrets",
                        interface="org.freedesktop.Secret.Collection")
    results["secret of the wrong shape"] = outcome(conn, login, "CreateItem", "a{sv}(oayas)b",
                                                   ({}, ("/", b"", ["x"]), True))
    results["unknown member"] = outcome(conn, SERVICE, "Frobnicate")
    print(json.dumps(results))
elif command == "leave":
    paths = [open_session(conn, "plain", ("s", "")), open_session(conn, DH, ("ay", b"\x02"))]
    print(json.dumps({"sessions": paths}))
elif command == "try":
    print(json.dumps({"open": outcome(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))}))
elif command == "orphan":
    parent = os.getpid()
    if os.fork() != 0:
        os._exit(0)
    while os.getppid() == parent:
        time.sleep(0.01)
    try:
        call(conn, SERVICE, "OpenSession", "sv", ("plain", ("s", "")))
        print(json.dumps({"open": "ok", "message": ""}), flush=True)
    except DBusErrorResponse as error:
        print(json.dumps({"open": error.name, "message": str(error.data[0]) if error.data else ""}), flush=True)
elif command == "transfer":
    from cryptography.hazmat.backends import default_backend
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.padding import PKCS7

    session = secretstorage.util.open_session(conn)
    login = DBusAddress("/org/freedesktop/secrets/collection/login", bus_name="org.freedesktop.secrets",
                        interface="org.freedesktop.Secret.Collection")

    def seal(plain, pad=True):
        iv = os.urandom(16)
        if pad:
            padder = PKCS7(128).padder()
            plain = padder.update(plain) + padder.finalize()
        encryptor = Cipher(algorithms.AES(session.aes_key), modes.CBC(iv), default_backend()).encryptor()
        return iv, encryptor.update(plain) + encryptor.finalize()

    def create(connection, session_path, parameters, value):
        props = {"org.freedesktop.Secret.Item.Label": ("s", "t"),
                 "org.freedesktop.Secret.Item.Attributes": ("a{ss}", {"transfer": "test"})}
        return outcome(connection, login, "CreateItem", "a{sv}(oayays)b",
                       (props, (session_path, parameters, value, "text/plain"), True))

    results = {}
    iv, value = seal(b"well sealed")
    results["well sealed"] = create(conn, session.object_path, iv, value)
    results["15-byte IV"] = create(conn, session.object_path, iv[:15], value)
    results["empty value"] = create(conn, session.object_path, iv, b"")
    results["not whole blocks"] = create(conn, session.object_path, iv, value[:-1])
    # A block whose last byte is 0: no PKCS#7 padding ends that way.
    iv, value = seal(b"\x00" * 16, pad=False)
    results["bad padding"] = create(conn, session.object_path, iv, value)
    other = open_dbus_connection(bus="SESSION")
    iv, value = seal(b"x")
    results["another connection's session"] = create(other, session.object_path, iv, value)
    results["no such session"] = create(conn, "/org/freedesktop/secrets/session/999999", iv, value)
    print(json.dumps(results))
