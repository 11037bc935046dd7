#!/usr/bin/python3
# A stand-in for polkitd on a test's private system bus (Tests/IntegrationTests/
# PolkitPresenceTests.swift). It owns org.freedesktop.PolicyKit1 and answers
# Authority.CheckAuthorization as its one argument says, writes each call it gets to the file
# named by its second argument (one JSON object a line: subject, action, details, flags,
# cancellation id; CancelCheckAuthorization too), and prints "ready" once the name is its own.
# A check without AllowUserInteraction (keychaind's probe) is answered as polkit answers an
# auth_self action for a subject in an active local session (a challenge), unless the mode
# says otherwise. Modes, for the check that may ask:
#   yes            authorized (the person typed their password into the agent)
#   dismissed      not authorized, polkit.dismissed (the person closed the dialog)
#   wrong          not authorized (wrong passwords)
#   no-agent       a challenge: no authentication agent reaches the subject
#   rule-yes       the probe is already authorized (a rule answers yes without asking)
#   no-session     the probe is not authorized and no challenge (allow_any = no)
#   untrusted      the error polkitd gives a caller that is neither root nor an owner
#   hang           never answers the check (until CancelCheckAuthorization)
# Needs python3-dbus and python3-gi (scripts/install-deps).
import json
import os
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

NAME = "org.freedesktop.PolicyKit1"
AUTHORITY = "org.freedesktop.PolicyKit1.Authority"


def plain(value):
    if isinstance(value, (dbus.Dictionary, dict)):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (dbus.Struct, dbus.Array, list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dbus.Boolean):
        return bool(value)
    if isinstance(value, (dbus.String, dbus.ObjectPath)):
        return str(value)
    if isinstance(value, (dbus.Int32, dbus.UInt32, dbus.Int64, dbus.UInt64, dbus.Byte)):
        return int(value)
    return value


class Authority(dbus.service.Object):
    def __init__(self, bus, mode, log):
        super().__init__(bus, "/org/freedesktop/PolicyKit1/Authority")
        self.mode = mode
        self.log = log
        self.pending = {}

    def record(self, entry):
        with open(self.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    @dbus.service.method(AUTHORITY, in_signature="(sa{sv})sa{ss}us", out_signature="(bba{ss})",
                         async_callbacks=("reply", "error"))
    def CheckAuthorization(self, subject, action, details, flags, cancellation_id, reply, error):
        kind, fields = subject
        self.record({"call": "CheckAuthorization", "kind": str(kind), "subject": plain(fields),
                     "types": {str(k): type(v).__name__ for k, v in fields.items()},
                     "action": str(action), "details": plain(details), "flags": int(flags),
                     "cancellation_id": str(cancellation_id)})
        mode = self.mode
        if mode == "untrusted":
            error(dbus.exceptions.DBusException(
                "Only trusted callers (e.g. uid 0 or an action owner) can use CheckAuthorization() and pass details",
                name="org.freedesktop.PolicyKit1.Error.NotAuthorized"))
            return
        if not int(flags) & 1:
            if mode == "rule-yes":
                reply((True, False, {}))
            elif mode == "no-session":
                reply((False, False, {}))
            else:
                reply((False, True, {}))
            return
        if mode == "hang":
            self.pending[str(cancellation_id)] = error
            return
        answers = {
            "yes": (True, False, {}),
            "dismissed": (False, False, {"polkit.dismissed": "true"}),
            "wrong": (False, False, {}),
            "no-agent": (False, True, {}),
        }
        reply(answers[mode])

    @dbus.service.method(AUTHORITY, in_signature="s", out_signature="")
    def CancelCheckAuthorization(self, cancellation_id):
        self.record({"call": "CancelCheckAuthorization", "cancellation_id": str(cancellation_id)})
        error = self.pending.pop(str(cancellation_id), None)
        if error is not None:
            error(dbus.exceptions.DBusException("cancelled", name="org.freedesktop.PolicyKit1.Error.Cancelled"))


def main():
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    authority = Authority(bus, sys.argv[1], sys.argv[2])
    name = dbus.service.BusName(NAME, bus, do_not_queue=True)
    loop = GLib.MainLoop()

    def stop(fd, condition):
        if not os.read(fd, 4096):
            loop.quit()
            return False
        return True

    GLib.io_add_watch(sys.stdin.fileno(), GLib.IO_IN | GLib.IO_HUP, stop)
    print("ready", flush=True)
    loop.run()
    # The bus may be gone already (the test stops it first): leave without releasing the name.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
