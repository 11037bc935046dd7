"""A client for keychaind, written from docs/protocol.md alone, standard library only.

    from keychaind_client import Connection
    c = Connection()                       # $KEYCHAIN_SOCKET, else the default socket
    c.add({"class": "genp", "svce": "api", "acct": "me", "v_Data": b"token"})
    c.copy_matching({"class": "genp", "svce": "api", "r_Data": True})   # -> b"token"

Values: str is a string, bytes a data value, bool a boolean, int a number, AbsoluteTime (or a
datetime) a date. Errors raise KeychainError with Apple's OSStatus code in .status.

Before sending anything on a connection, the client asks the kernel (SO_PEERCRED) who serves the
socket and talks only to root, to the caller's own uid, or to a uid the caller names with
Connection(trust_uid=...) or $KEYCHAIN_TRUST_UID (a uid or a user name). The default
/tmp/keychaind-UID directory is used only when it is a real directory private to the caller.
"""

from __future__ import annotations

import datetime as _dt
import os
import pwd
import socket
import stat
import struct
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Union

if TYPE_CHECKING:
    from .access_control import AccessControl
    from .context import AuthenticationContext

# What the SecItem calls take and return: values as in docs/protocol.md, section 3.
Attributes = Dict[str, Any]
#: copy_matching and add: bytes (r_Data or r_PersistentRef alone), a dict (r_Attributes or
#: several return keys), a list of either (match limit not one), or None (no return key).
#: Any rather than their union: the query decides which, and callers know it.
Result = Any

__all__ = ["Connection", "KeychainError", "UserCanceled", "InteractionNotAllowed", "AuthFailed", "AccessControl",
           "AuthenticationContext",
           "REQUIRE", "AbsoluteTime", "default_socket_path", "Status", "ACCESSIBLE",
           "SYNCHRONIZABLE_ANY", "Synchronizable", "SyncStatus", "SyncDevice", "SyncFingerprints", "SyncRemoval",
           "Key", "KeyType", "SigningAlgorithm", "AgreementAlgorithm", "EncryptionAlgorithm"]

PROTOCOL_VERSION = 1
MAX_FRAME = (1 << 20) + (256 << 10)
# Responses may be longer than requests by what the daemon adds to an item (docs/protocol.md).
MAX_RESPONSE = MAX_FRAME + (64 << 10)
_EPOCH_2001 = 978307200.0


class Status:
    """OSStatus codes keychaind returns (docs/protocol.md, section 4): every code of the
    daemon's KeychainStatus, so that a caller can name any status it may see."""
    SUCCESS = 0
    UNIMPLEMENTED = -4
    USER_CANCELED = -128  # the person said no at keychaind's prompt (and the Swift client's cancelled async calls)
    IO = -36
    PARAM = -50
    ALLOCATE = -108
    NOT_AVAILABLE = -25291
    READ_ONLY = -25292
    AUTH_FAILED = -25293
    DUPLICATE_ITEM = -25299
    ITEM_NOT_FOUND = -25300
    NO_SUCH_ATTR = -25303
    NO_SUCH_CLASS = -25306
    INTERACTION_NOT_ALLOWED = -25308
    DECODE = -26275
    INTERNAL = -26276
    MISSING_ENTITLEMENT = -34018
    SERVICE_NOT_AVAILABLE = -67585
    UNKNOWN_FORMAT = -25257  # a certificate that is not one DER X.509 certificate


#: kSecAttrAccessible by the names the keychain CLI uses, with the pdmn code each stands for.
ACCESSIBLE = {
    "when-unlocked": "ak",
    "after-first-unlock": "ck",
    "always": "dk",
    "when-unlocked-this-device-only": "aku",
    "after-first-unlock-this-device-only": "cku",
    "always-this-device-only": "dku",
    "when-passcode-set-this-device-only": "akpu",
}


#: kSecAttrSynchronizableAny: a search for synced and local items alike (the wire's "syna").
SYNCHRONIZABLE_ANY = "syna"

#: What the synchronizable= parameters take: True (synced items only; on add, a synced item),
#: False (local items only), SYNCHRONIZABLE_ANY or "any" (searches: both), or None (say
#: nothing: keychaind then matches local items only, as SecItem does, and adds a local item).
Synchronizable = Union[bool, str, None]


def _with_sync(attributes: Attributes, synchronizable: Synchronizable) -> Attributes:
    """attributes with kSecAttrSynchronizable set from synchronizable (a copy; None: as given)."""
    if synchronizable is None:
        return attributes
    if "sync" in attributes:
        raise ValueError("give kSecAttrSynchronizable once: the dictionary's \"sync\" or synchronizable=, not both")
    if isinstance(synchronizable, bool):
        value: Union[bool, str] = synchronizable
    elif synchronizable in (SYNCHRONIZABLE_ANY, "any"):
        value = SYNCHRONIZABLE_ANY
    else:
        raise ValueError("synchronizable is True, False, None or SYNCHRONIZABLE_ANY, not %r" % (synchronizable,))
    return dict(attributes, sync=value)


def _pdmn(accessible: str) -> str:
    """The pdmn code for an accessibility name (or for a pdmn code, kept as it is)."""
    if accessible in ACCESSIBLE:
        return ACCESSIBLE[accessible]
    if accessible in ACCESSIBLE.values():
        return accessible
    raise ValueError("accessible must be one of %s, not %r" % (", ".join(ACCESSIBLE), accessible))


class KeychainError(Exception):
    """A call failed: .status is the OSStatus code, .message what keychaind said."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__("%s (%d)" % (message, status))
        self.status = status
        self.message = message


class UserCanceled(KeychainError):
    """The person at keychaind's prompt said no (Status.USER_CANCELED, errSecUserCanceled)."""


class InteractionNotAllowed(KeychainError):
    """The item's class is locked, or the item asks the person first and nobody may or can be
    asked: auth_ui="fail", no [prompt] in keychaind's config, no keychain passcode
    (Status.INTERACTION_NOT_ALLOWED, errSecInteractionNotAllowed)."""


class AuthFailed(KeychainError):
    """A passcode was refused: at keychaind's prompt (three wrong tries), or an unlock's
    (Status.AUTH_FAILED, errSecAuthFailed)."""


_ERRORS = {-128: UserCanceled, -25308: InteractionNotAllowed, -25293: AuthFailed}


def _error(status, message):
    """KeychainError for status, of its own subclass where it has one."""
    return _ERRORS.get(status, KeychainError)(status, message)


class AbsoluteTime(float):
    """A date: seconds since 2001-01-01 00:00:00 UTC (CFAbsoluteTime)."""

    def to_datetime(self) -> _dt.datetime:
        return _dt.datetime.fromtimestamp(float(self) + _EPOCH_2001, tz=_dt.timezone.utc)


def default_socket_path() -> str:
    """$KEYCHAIN_SOCKET, else keychaind's default for this user."""
    return _default_socket()[0]


def _default_socket():
    """(path, directory): directory is the /tmp one that must be private to the caller, or None."""
    env = os.environ.get("KEYCHAIN_SOCKET")
    if env:
        return env, None
    if os.getuid() == 0:
        return "/run/keychaind/keychaind.sock", None
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run:
        return run + "/keychaind.sock", None
    directory = "/tmp/keychaind-%d" % os.getuid()
    # Another user may make /tmp/keychaind-UID first: keychaind then listens in a directory
    # only this user can create, and the client goes there once it exists.
    home = _home_socket_directory()
    if home and not _is_private_dir(directory, absent_too=True) and _is_private_dir(home, absent_too=False):
        return home + "/keychaind.sock", None
    return directory + "/keychaind.sock", directory


def _home_socket_directory():
    """$XDG_STATE_HOME/keychaind, else ~/.local/state/keychaind; None without HOME."""
    state = os.environ.get("XDG_STATE_HOME")
    if state and state.startswith("/"):
        return state + "/keychaind"
    home = os.environ.get("HOME")
    if home and home.startswith("/") and home != "/":
        return home + "/.local/state/keychaind"
    return None


def _is_private_dir(path, absent_too):
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return absent_too
    except OSError:  # a HOME this user may not look into is not theirs
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return "unknown user"


def _resolve_uid(value):
    """A uid from an int, or a str holding a uid number or a user name; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError("trust_uid is a uid (int) or a user name (str), not %s" % type(value).__name__)
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            value = int(text)
        else:
            try:
                return pwd.getpwnam(text).pw_uid
            except KeyError:
                raise ValueError("%r is neither a uid nor a user name" % value) from None
    if value < 0:
        raise ValueError("%d is not a uid" % value)
    return value


# -- encoding (docs/protocol.md, section 3) --

def _encode_value(v):
    if isinstance(v, bool):
        return b"\x04" + (b"\x01" if v else b"\x00")
    if isinstance(v, AbsoluteTime):
        return b"\x05" + struct.pack("<d", float(v))
    if isinstance(v, _dt.datetime):
        return b"\x05" + struct.pack("<d", v.timestamp() - _EPOCH_2001)
    if isinstance(v, int):
        return b"\x03" + struct.pack("<q", v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        return b"\x01" + struct.pack("<I", len(b)) + b
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        return b"\x02" + struct.pack("<I", len(b)) + b
    raise TypeError("keychain values are str, bytes, bool, int or dates, not %s" % type(v).__name__)


def _encode_dict(d):
    out = [struct.pack("<I", len(d))]
    for key in sorted(d):
        k = key.encode("utf-8")
        out.append(struct.pack("<H", len(k)) + k + _encode_value(d[key]))
    return b"".join(out)


class _Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise KeychainError(Status.DECODE, "truncated answer from keychaind")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack("<H", self.take(2))[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def i32(self):
        return struct.unpack("<i", self.take(4))[0]

    def blob(self):
        return bytes(self.take(self.u32()))

    def value(self):
        tag = self.u8()
        if tag == 1:
            return self.blob().decode("utf-8")
        if tag == 2:
            return self.blob()
        if tag == 3:
            return struct.unpack("<q", self.take(8))[0]
        if tag == 4:
            return self.u8() == 1
        if tag == 5:
            return AbsoluteTime(struct.unpack("<d", self.take(8))[0])
        raise KeychainError(Status.DECODE, "unknown value type %d" % tag)

    def dict(self):
        d = {}
        for _ in range(self.u32()):
            key = self.take(self.u16()).decode("utf-8")
            d[key] = self.value()
        return d

    def item(self):
        kind = self.u8()
        if kind in (1, 2):
            return self.blob()
        if kind == 3:
            return self.dict()
        raise KeychainError(Status.DECODE, "unknown result kind %d" % kind)


_OPS = {"add": 1, "copyMatching": 2, "update": 3, "delete": 4, "status": 5,
        "lock": 6, "unlock": 7, "setPasscode": 8, "changePasscode": 9, "removePasscode": 10,
        "keyGenerate": 24, "keyPublic": 25, "keySign": 26, "keyVerify": 27, "keyAgree": 28,
        "keyEncrypt": 29, "keyDecrypt": 30,
        "syncStatus": 32, "syncCreate": 33, "syncJoin": 34, "syncApprove": 35, "syncRemove": 36,
        "syncDevices": 37, "syncLeave": 38, "syncNow": 39, "metrics": 45,
        "contextCreate": 49, "contextAuthenticate": 50, "contextSetCredential": 51, "contextInvalidate": 52}


class Connection:
    """One connection to keychaind; thread-safe (calls take turns); reconnects when the daemon
    restarted. Results have the shapes of SecItemCopyMatching: bytes for r_Data or
    r_PersistentRef alone, a dict for r_Attributes or several return keys, a list when the
    match limit is not one, None when no return key was asked.

    Every connection is checked before anything is sent on it: the daemon must run as root, as
    the caller, or as trust_uid (a uid or a user name; default $KEYCHAIN_TRUST_UID). Otherwise
    the call raises KeychainError(SERVICE_NOT_AVAILABLE) and nothing reaches that process."""

    def __init__(self, socket_path: Optional[str] = None, timeout: float = 60.0,
                 trust_uid: Union[int, str, None] = None) -> None:
        if socket_path:
            self.socket_path, self._private_dir = socket_path, None
        else:
            self.socket_path, self._private_dir = _default_socket()
        self.trust_uid = None if trust_uid is None else _resolve_uid(trust_uid)
        self._trust_env = os.environ.get("KEYCHAIN_TRUST_UID") if trust_uid is None else None
        self.timeout = timeout
        self._sock = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A connection dropped without close() (a keyring backend lives until exit) must not
        # leave its socket to the garbage collector, which warns (ResourceWarning) at exit.
        sock = getattr(self, "_sock", None)
        if sock is not None:
            self._sock = None
            sock.close()

    # SecItem calls. synchronizable= sets the dictionary's "sync" (kSecAttrSynchronizable; see
    # Synchronizable); in update it selects the items, and changes may carry "sync" to move one.
    #
    # Items that ask first (docs/security.md): add's access_control= (an AccessControl or its
    # "accc" string) or require= (the CLI's names: "presence", "passcode", or a list) makes one;
    # a read of its secret then waits while keychaind asks the person for the keychain passcode.
    # auth_ui= on reads: "allow" (the default: ask), "fail" (InteractionNotAllowed instead of
    # asking) or "skip" (copy_matching leaves such items out); reason= is the prompt's reason.
    # The person saying no raises UserCanceled; nobody to ask, InteractionNotAllowed.
    #
    # The application password (docs/security.md, "The application password"): an item added
    # with require="app-password" (accc flag APPLICATION_PASSWORD) has its secret sealed under
    # app_password= (str or bytes, at most 1024 bytes), which every read of its secret
    # (copy_matching, get_password) and every new secret (update) must give again. It goes to
    # keychaind in an authentication context made for the one call (ops 49, 51, 52) on this
    # connection; the client's copies are bytearrays, zeroed once sent (a str or bytes the
    # caller passes is the caller's: Python cannot wipe those). Without it such a call raises
    # InteractionNotAllowed; a wrong one AuthFailed (keychaind delays each item's tries after
    # four), whose message never holds the password.
    #
    # context= (an AuthenticationContext of this connection; Apple's
    # kSecUseAuthenticationContext): the call carries it, so that an authenticated context
    # spares the prompt and a context holding an application password gives it. Not with
    # app_password= (which makes a context of its own for the one call).
    def add(self, attributes: Attributes, *, synchronizable: Synchronizable = None,
            access_control: Union[AccessControl, str, None] = None,
            require: Union[str, Iterable[str], None] = None,
            app_password: _Password = None, context: Optional[AuthenticationContext] = None) -> Result:
        attributes = _with_sync(attributes, synchronizable)
        attributes = _with_access_control(attributes, access_control, require)
        return self._with_app_password(app_password, "add", lambda a: _encode_dict(a), attributes, context=context)

    def copy_matching(self, query: Attributes, *, synchronizable: Synchronizable = None,
                      auth_ui: Optional[str] = None, reason: Optional[str] = None,
                      app_password: _Password = None, context: Optional[AuthenticationContext] = None) -> Result:
        query = _with_auth_ui(_with_sync(query, synchronizable), auth_ui, reason)
        return self._with_app_password(app_password, "copyMatching", lambda q: _encode_dict(q), query, retry=True,
                                       context=context)

    def update(self, query: Attributes, changes: Attributes, *, synchronizable: Synchronizable = None,
               app_password: _Password = None, context: Optional[AuthenticationContext] = None) -> None:
        query = _with_sync(query, synchronizable)
        self._with_app_password(app_password, "update", lambda q: _encode_dict(q) + _encode_dict(changes), query,
                                context=context)

    def _with_app_password(self, password, op, encode, query, retry=False, context=None):
        """op with query encoded by encode, carrying (u_CredRef) the caller's context, or a
        context that holds password, made, used and ended under one hold of the lock; without
        either, the plain call."""
        if context is not None:
            if password is not None:
                raise ValueError("give app_password= or context=, not both (set_application_password on the context)")
            if "u_CredRef" in query:
                raise ValueError("give context= or the query's \"u_CredRef\", not both")
            if context.connection is not self:
                raise ValueError("an authentication context is used on the connection that made it")
            # Not retried on a new connection: the context lives on this one only.
            return self._call(op, encode(context.applied(query)))
        if password is None:
            return self._call(op, encode(query), retry=retry)
        if "u_CredRef" in query:
            raise ValueError("give app_password= or the query's \"u_CredRef\", not both")
        secret = _password_buffer(password)
        try:
            with self._lock:
                reference = self._call_locked("contextCreate", b"", retry=retry)
                try:
                    body = bytearray(_lp(reference))
                    body += struct.pack("<I", len(secret))
                    body += secret
                    self._call_locked("contextSetCredential", body, wipe=True)
                    return self._call_locked(op, encode(dict(query, u_CredRef=bytes(reference))))
                finally:
                    try:
                        self._call_locked("contextInvalidate", _lp(reference))
                    except KeychainError:
                        pass  # the connection is gone, and the context with it
        finally:
            _wipe(secret)

    def delete(self, query: Attributes, *, synchronizable: Synchronizable = None) -> None:
        self._call("delete", _encode_dict(_with_sync(query, synchronizable)))

    # daemon calls
    def status(self) -> Attributes:
        return self._call("status", b"", retry=True)

    def lock(self) -> None:
        self._call("lock", b"", retry=True)

    def metrics(self) -> str:
        """The daemon's metrics, Prometheus's text exposition (admin callers only)."""
        return bytes(self._call("metrics", b"", retry=True)).decode("utf-8")

    def unlock(self, passcode: Union[str, bytes]) -> None:
        self._call("unlock", _lp(passcode))

    def set_passcode(self, new: Union[str, bytes]) -> None:
        self._call("setPasscode", _lp(new))

    def change_passcode(self, old: Union[str, bytes], new: Union[str, bytes]) -> None:
        self._call("changePasscode", _lp(old) + _lp(new))

    def remove_passcode(self, current: Union[str, bytes]) -> None:
        self._call("removePasscode", _lp(current))

    # key calls (docs/protocol.md, operations 24-30; the Key class wraps them)
    # app_password=: for a key sealed under an application password (accc flag
    # APPLICATION_PASSWORD): generate seals the key under it; sign, agree and decrypt need it.
    # context=: an AuthenticationContext of this connection (as for the SecItem calls).
    def key_generate(self, attributes: Attributes, *, app_password: _Password = None,
                     context: Optional[AuthenticationContext] = None) -> Attributes:
        """Makes a private key inside keychaind; its item's attributes with v_PersistentRef."""
        return self._with_app_password(app_password, "keyGenerate", lambda a: _encode_dict(a), attributes,
                                       context=context)

    def key_public(self, query: Attributes) -> bytes:
        return self._call("keyPublic", _encode_dict(query), retry=True)

    def key_sign(self, query: Attributes, parameters: Attributes, *, app_password: _Password = None,
                         context: Optional[AuthenticationContext] = None) -> bytes:
        return self._with_app_password(app_password, "keySign", lambda q: _encode_dict(q) + _encode_dict(parameters), query,
                                       retry=True, context=context)

    def key_verify(self, query: Attributes, parameters: Attributes) -> bool:
        answer = self._call("keyVerify", _encode_dict(query) + _encode_dict(parameters), retry=True)
        return bool(answer["valid"])

    def key_agree(self, query: Attributes, parameters: Attributes, *, app_password: _Password = None,
                          context: Optional[AuthenticationContext] = None) -> bytes:
        return self._with_app_password(app_password, "keyAgree", lambda q: _encode_dict(q) + _encode_dict(parameters), query,
                                       retry=True, context=context)

    def key_encrypt(self, query: Attributes, parameters: Attributes) -> bytes:
        return self._call("keyEncrypt", _encode_dict(query) + _encode_dict(parameters), retry=True)

    def key_decrypt(self, query: Attributes, parameters: Attributes, *, app_password: _Password = None,
                            context: Optional[AuthenticationContext] = None) -> bytes:
        return self._with_app_password(app_password, "keyDecrypt", lambda q: _encode_dict(q) + _encode_dict(parameters), query,
                                       retry=True, context=context)

    # sync calls (docs/protocol.md, operations 32-39). Without a [sync] database in keychaind's
    # config every one raises KeychainError(NOT_AVAILABLE) naming the setting.
    def sync_status(self) -> SyncStatus:
        """This device's circle membership and sync thread; state "off" outside a circle."""
        return SyncStatus._from_answer(self._call("syncStatus", b"", retry=True))

    def sync_now(self) -> None:
        """Runs a sync pass (push and pull) and returns once it has ended; its failure raises.
        NOT_AVAILABLE outside a circle; INTERACTION_NOT_ALLOWED before the first unlock."""
        self._call("syncNow", b"", retry=True)

    def sync_devices(self) -> List[SyncDevice]:
        """The circle's devices, members and those waiting for approval."""
        return [SyncDevice._from_answer(a) for a in self._call("syncDevices", b"", retry=True) or []]

    # admin sync calls: the caller needs keychaind's admin right (root or the daemon's uid by default).
    def sync_create(self, name: str) -> SyncFingerprints:
        """Founds a circle in the configured database; name (at most 64 bytes) names this device."""
        return SyncFingerprints._from_answer(self._call("syncCreate", _lp(name)))

    def sync_join(self, circle: str, name: str) -> SyncFingerprints:
        """Asks to join the circle of those digits; a member then approves the device's digits."""
        return SyncFingerprints._from_answer(self._call("syncJoin", _lp(circle) + _lp(name)))

    def sync_approve(self, device: str) -> SyncDevice:
        """Makes the waiting device of those digits a member (compare them on both devices first)."""
        return SyncDevice._from_answer(self._call("syncApprove", _lp(device)))

    def sync_remove(self, device: str) -> SyncRemoval:
        """Removes the member of those digits, rotating the circle key."""
        return SyncRemoval._from_answer(self._call("syncRemove", _lp(device)))

    def sync_leave(self) -> None:
        """Leaves the circle; the items stay on this device."""
        self._call("syncLeave", b"")

    # transport
    def _connect(self):
        if self._private_dir is not None:
            self._check_private_dir()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.socket_path)
        except OSError as e:
            s.close()
            raise self._unreachable(e) from None
        try:
            self._check_peer(s)
        except BaseException:
            s.close()
            raise
        return s

    def _unreachable(self, e):
        return KeychainError(Status.SERVICE_NOT_AVAILABLE,
                             "cannot reach keychaind at %s (%s); start it with `keychaind`, "
                             "or set KEYCHAIN_SOCKET to where it listens"
                             % (self.socket_path, e.strerror or e))

    def _check_private_dir(self):
        """The default /tmp/keychaind-UID is anyone's to create first: use it only when it is a
        real directory (not a symbolic link) owned by the caller with no group or other access."""
        directory, me = self._private_dir, os.getuid()
        try:
            st = os.lstat(directory)
        except FileNotFoundError as e:
            raise self._unreachable(e) from None
        except OSError as e:
            problem = "it cannot be examined: %s" % (e.strerror or e)
        else:
            if stat.S_ISLNK(st.st_mode):
                problem = "it is a symbolic link"
            elif not stat.S_ISDIR(st.st_mode):
                problem = "it is not a directory"
            elif st.st_uid != me:
                problem = "it is owned by uid %d (%s)" % (st.st_uid, _user_name(st.st_uid))
            elif st.st_mode & 0o077:
                problem = "its mode is %04o, not 0700" % stat.S_IMODE(st.st_mode)
            else:
                return
        raise KeychainError(Status.SERVICE_NOT_AVAILABLE,
                            "refusing to use keychaind's default socket %s: %s is not a private "
                            "directory owned by you (uid %d) (%s); remove it, or set KEYCHAIN_SOCKET "
                            "(keychaind started now listens in %s instead)"
                            % (self.socket_path, directory, me, problem,
                               _home_socket_directory() or "~/.local/state/keychaind, with HOME set,"))

    def _check_peer(self, s):
        """Who serves the socket, as the kernel says: root, the caller or the trusted uid only."""
        me = os.getuid()
        try:
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("iII", cred)
        except (OSError, AttributeError, struct.error) as e:
            raise KeychainError(Status.SERVICE_NOT_AVAILABLE,
                                "refusing to talk to keychaind at %s: cannot tell who serves it (%s)"
                                % (self.socket_path, e)) from None
        if uid == 0 or uid == me:
            return
        trusted, note = self.trust_uid, ""
        if trusted is None and self._trust_env:
            try:
                trusted = _resolve_uid(self._trust_env)
            except ValueError:
                note = " (KEYCHAIN_TRUST_UID=%s is neither a uid nor a user name)" % self._trust_env
        if trusted is not None and uid == trusted:
            return
        raise KeychainError(Status.SERVICE_NOT_AVAILABLE,
                            "refusing to talk to keychaind at %s: it is served by uid %d (%s), not by "
                            "root or by you (uid %d)%s; if you trust that daemon, set "
                            "KEYCHAIN_TRUST_UID=%d or pass trust_uid=%d"
                            % (self.socket_path, uid, _user_name(uid), me, note, uid, uid))

    def _exchange(self, frame):
        self._sock.sendall(frame)
        return self._read_frame()

    def _read_frame(self):
        header = self._recv(4)
        (n,) = struct.unpack("<I", header)
        if n < 1 or n > MAX_RESPONSE:
            raise KeychainError(Status.DECODE, "keychaind sent a frame of %d bytes" % n)
        return self._recv(n)

    def _recv(self, n):
        chunks = []
        while n > 0:
            b = self._sock.recv(n)
            if not b:
                raise ConnectionResetError("keychaind closed the connection")
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)

    def _call(self, op, body, retry=False):
        with self._lock:
            return self._call_locked(op, body, retry=retry)

    def _call_locked(self, op, body, retry=False, wipe=False):
        """One call, with self._lock held. wipe: body is a bytearray holding a secret, zeroed
        with the frame once sent (whatever happens)."""
        frame = bytearray(struct.pack("<I", 2 + len(body)))
        frame += bytes([PROTOCOL_VERSION, _OPS[op]])
        frame += body
        try:
            answer = self._send(frame, retry)
        finally:
            if wipe:
                _wipe(frame)
                _wipe(body)
        return self._answer(answer)

    def _send(self, frame, retry):
        for attempt in (1, 2):
            reused = self._sock is not None
            if not reused:
                self._sock = self._connect()
            try:
                answer = self._exchange(frame)
                break
            except (OSError, ConnectionResetError) as e:
                self._sock.close()
                self._sock = None
                # A connection kept from before may have died with a daemon restart.
                if reused and attempt == 1 and (retry or isinstance(e, BrokenPipeError)):
                    continue
                raise KeychainError(Status.SERVICE_NOT_AVAILABLE,
                                    "lost the connection to keychaind: %s" % e) from None
        return answer

    def _answer(self, answer):
        # A long list answer comes in pages: result kind 3 says another frame follows.
        items = None
        while True:
            r = _Reader(answer)
            if r.u8() != PROTOCOL_VERSION:
                raise KeychainError(Status.DECODE, "keychaind answered in another protocol version")
            status = r.i32()
            message = r.blob().decode("utf-8")
            kind = r.u8()
            if status != 0:
                raise _error(status, message or "keychaind returned %d" % status)
            if kind == 0:
                return None
            if kind == 1:
                return r.item()
            page = [r.item() for _ in range(r.u32())]
            if items is None:
                items = page
            else:
                items.extend(page)
            if kind == 2:
                return items
            try:
                answer = self._read_frame()
            except (OSError, ConnectionResetError) as e:
                self._sock.close()
                self._sock = None
                raise KeychainError(Status.SERVICE_NOT_AVAILABLE,
                                    "lost the connection to keychaind mid-answer: %s" % e) from None

    # the common case
    def get_password(self, service: str, account: str, *, synchronizable: Synchronizable = None,
                     auth_ui: Optional[str] = None, reason: Optional[str] = None,
                     app_password: _Password = None, context: Optional[AuthenticationContext] = None) -> Optional[bytes]:
        """The secret of a generic password, or None. A local one unless synchronizable says
        otherwise (True: a synced one; SYNCHRONIZABLE_ANY: either). auth_ui and reason: as for
        copy_matching, for a password that asks first; app_password: for one sealed under an
        application password; context: an AuthenticationContext of this connection."""
        try:
            return self.copy_matching({"class": "genp", "svce": service, "acct": account, "r_Data": True},
                                      synchronizable=synchronizable, auth_ui=auth_ui, reason=reason,
                                      app_password=app_password, context=context)
        except KeychainError as e:
            if e.status == Status.ITEM_NOT_FOUND:
                return None
            raise

    def set_password(self, service: str, account: str, secret: Union[str, bytes],
                     accessible: Optional[str] = None, *, synchronizable: Synchronizable = None,
                     expires: Optional[Union[_dt.datetime, _dt.timedelta]] = None) -> None:
        """Adds or replaces a generic password; secret is bytes or str. accessible: when the
        secret is readable, by name ("when-unlocked", the default; "after-first-unlock"...,
        see ACCESSIBLE) or by its pdmn code. synchronizable=True: the synced item of that
        service and account (a this-device-only class is then refused, Status.PARAM).
        expires: an aware datetime or a lifetime from now (the item's "expd": past it the
        daemon never returns it and deletes it); None keeps a replaced item's expiry."""
        data = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
        item = {"class": "genp", "svce": service, "acct": account, "v_Data": data}
        expiry = _expiry(expires)
        if expiry is not None:
            item["expd"] = expiry
        if accessible:
            accessible = _pdmn(accessible)
            item["pdmn"] = accessible
        try:
            self.add(item, synchronizable=synchronizable)
        except KeychainError as e:
            if e.status != Status.DUPLICATE_ITEM:
                raise
            changes: Attributes = {"v_Data": data}
            if expiry is not None:
                changes["expd"] = expiry
            if accessible:
                changes["pdmn"] = accessible
            self.update({"class": "genp", "svce": service, "acct": account}, changes, synchronizable=synchronizable)

    def delete_password(self, service: str, account: str, *, synchronizable: Synchronizable = None) -> None:
        """Deletes a generic password (local unless synchronizable says otherwise);
        KeychainError(ITEM_NOT_FOUND) when there is none. Works while the keychain is locked,
        as SecItemDelete does: deleting needs no class key."""
        self.delete({"class": "genp", "svce": service, "acct": account}, synchronizable=synchronizable)


def _expiry(expires):
    """`expires` as the date keychaind stores, or None."""
    if expires is None:
        return None
    if isinstance(expires, _dt.timedelta):
        return _dt.datetime.now(_dt.timezone.utc) + expires
    if isinstance(expires, _dt.datetime):
        if expires.tzinfo is None:
            raise ValueError("expires: give an aware datetime (a naive one's zone is a guess)")
        return expires
    raise TypeError("expires is a datetime or a timedelta, not %s" % type(expires).__name__)


def _lp(b):
    b = b.encode("utf-8") if isinstance(b, str) else bytes(b)
    return struct.pack("<I", len(b)) + b


#: What app_password= takes: the application password as str (UTF-8) or bytes-like; None: none.
_Password = Union[str, bytes, bytearray, memoryview, None]


def _password_buffer(password):
    """A bytearray copy of an application password, for the client to zero once sent."""
    if isinstance(password, str):
        return bytearray(password, "utf-8")
    if isinstance(password, (bytes, bytearray, memoryview)):
        return bytearray(password)
    raise TypeError("app_password is str or bytes, not %s" % type(password).__name__)


def _wipe(buffer):
    """Zeroes a bytearray in place (its memory, not a copy)."""
    buffer[:] = bytes(len(buffer))


# The key API, the sync calls' answers and access control; imported last because they build on
# what is above.
from .access_control import REQUIRE, AccessControl  # noqa: E402,F811
from .access_control import with_access_control as _with_access_control  # noqa: E402
from .access_control import with_auth_ui as _with_auth_ui  # noqa: E402
from .context import AuthenticationContext  # noqa: E402,F811
from .keys import AgreementAlgorithm, EncryptionAlgorithm, Key, KeyType, SigningAlgorithm  # noqa: E402
from .sync import SyncDevice, SyncFingerprints, SyncRemoval, SyncStatus  # noqa: E402
