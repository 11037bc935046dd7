#!/usr/bin/python3
# A stand-in for systemd-logind on a test's private system bus (Tests/IntegrationTests/
# SessionLockTests.swift). It owns org.freedesktop.login1, serves one session object per
# argument ID=UID at /org/freedesktop/login1/session/ID whose Properties.Get(Session, User)
# answers (UID, user path), and prints "ready" once the name is its own. Then each line on
# standard input sends a signal from it: "lock ID" (Session.Lock) or "sleep true|false"
# (Manager.PrepareForSleep). Needs python3-dbus and python3-gi (scripts/install-deps).
import os
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

NAME = "org.freedesktop.login1"
SESSION = "org.freedesktop.login1.Session"
MANAGER = "org.freedesktop.login1.Manager"


class Session(dbus.service.Object):
    def __init__(self, bus, session_id, uid):
        super().__init__(bus, "/org/freedesktop/login1/session/" + session_id)
        self.uid = uid

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        if interface != SESSION or name != "User":
            raise dbus.exceptions.DBusException(
                "no property %s.%s here" % (interface, name),
                name="org.freedesktop.DBus.Error.UnknownProperty")
        user = dbus.ObjectPath("/org/freedesktop/login1/user/_%d" % self.uid)
        return dbus.Struct((dbus.UInt32(self.uid), user), signature="uo", variant_level=1)

    @dbus.service.signal(SESSION, signature="")
    def Lock(self):
        pass


class Manager(dbus.service.Object):
    @dbus.service.signal(MANAGER, signature="b")
    def PrepareForSleep(self, start):
        pass


def main():
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    sessions = {}
    for argument in sys.argv[1:]:
        session_id, uid = argument.split("=")
        sessions[session_id] = Session(bus, session_id, int(uid))
    manager = Manager(bus, "/org/freedesktop/login1")
    name = dbus.service.BusName(NAME, bus, do_not_queue=True)
    loop = GLib.MainLoop()

    pending = b""

    # os.read, not sys.stdin: a buffered reader would hold back a second line that came in
    # the same read until more input woke the watch.
    def command(fd, condition):
        nonlocal pending
        chunk = os.read(fd, 4096)
        if not chunk:
            loop.quit()
            return False
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            words = line.decode().split()
            if words[:1] == ["lock"]:
                sessions[words[1]].Lock()
            elif words[:1] == ["sleep"]:
                manager.PrepareForSleep(words[1] == "true")
        return True

    GLib.io_add_watch(sys.stdin.fileno(), GLib.IO_IN | GLib.IO_HUP, command)
    print("ready", flush=True)
    loop.run()
    # The bus may be gone already (the test stops it first): leave without releasing the name,
    # which would print a traceback from BusName's finaliser.
    sys.stdout.flush()
    os._exit(0)


main()
