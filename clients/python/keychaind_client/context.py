"""Authentication contexts, as Apple's LAContext is to SecItem (issue 29; docs/protocol.md,
operations 49 to 52, "Authentication contexts")."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Dict, Optional

from . import KeychainError, _lp, _password_buffer, _wipe

if TYPE_CHECKING:
    from . import Connection, _Password


class AuthenticationContext:
    """One authentication context on one connection: the person is asked once (at the first
    read or key use that asks while carrying it, or at authenticate()), then the items and
    keys that ask first are read and used without a prompt each, until the context is
    invalidated, the keychain locks, its connection closes, or keychaind's maximum age
    (context_max_age_seconds, 300 s by default) passes. It may also hold an application
    password (set_application_password), which reads, adds and key uses with it then carry.

        with AuthenticationContext(conn) as context:
            context.authenticate("deploy the release")        # optional: the first read asks too
            conn.get_password("prod", "deploy", context=context)
            key.sign(data, context=context)

    keychaind binds the context to the connection that made it and to this process: pass it
    only to that connection's calls (context=; another connection's raises ValueError before
    anything is sent). A reconnection (a daemon restart) ends it, and keychaind then answers
    KeychainError(PARAM). Leaving the with block invalidates it."""

    def __init__(self, connection: "Connection") -> None:
        self.connection = connection
        self._reference: Optional[bytes] = bytes(connection._call("contextCreate", b""))

    @property
    def reference(self) -> bytes:
        """What calls carry as "u_CredRef": worth nothing to another connection or process."""
        if self._reference is None:
            raise ValueError("the authentication context was invalidated")
        return self._reference

    def authenticate(self, reason: str) -> None:
        """Asks the person now, at keychaind's prompt, showing reason (LAContext.evaluatePolicy
        with a localized reason). UserCanceled when they cancel, AuthFailed after wrong
        passcodes, InteractionNotAllowed when keychaind has nowhere to ask."""
        self.connection._call("contextAuthenticate", _lp(self.reference) + _lp(reason))

    #: LAContext's name for it.
    evaluate = authenticate

    def set_application_password(self, password: "_Password") -> None:
        """Gives the context the application password (LAContext.setCredential with
        .applicationPassword): items and keys with the accc flag APPLICATION_PASSWORD are
        sealed and opened with it. b"" takes it away. At most 1024 bytes; the client's copies
        are zeroed once sent (a str or bytes the caller passes is the caller's)."""
        secret = _password_buffer(password)
        try:
            body = bytearray(_lp(self.reference))
            body += struct.pack("<I", len(secret))
            body += secret
            with self.connection._lock:
                self.connection._call_locked("contextSetCredential", body, wipe=True)
        finally:
            _wipe(secret)

    def invalidate(self) -> None:
        """Ends the context (LAContext.invalidate); a second call does nothing."""
        if self._reference is None:
            return
        reference, self._reference = self._reference, None
        self.connection._call("contextInvalidate", _lp(reference))

    @property
    def valid(self) -> bool:
        """False once invalidate() ran (keychaind may have ended it earlier: lock, age)."""
        return self._reference is not None

    def applied(self, query: Dict[str, Any]) -> Dict[str, Any]:
        """query carrying this context (u_CredRef)."""
        return dict(query, u_CredRef=self.reference)

    def __enter__(self) -> "AuthenticationContext":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.invalidate()
        except KeychainError:
            pass  # the connection is gone, and the context with it

    def __repr__(self) -> str:
        return "AuthenticationContext(%s)" % ("valid" if self.valid else "invalidated")
