"""A backend for the `keyring` library that keeps passwords in keychaind.

    import keyring
    from keychaind_client.keyring_backend import KeychaindKeyring
    keyring.set_keyring(KeychaindKeyring())

or, once this package is installed, `keyring` finds it by its entry point. Passwords are
generic-password items: service -> svce, username -> acct, the password (UTF-8) -> the secret,
in the caller's default access group.

Reads, changes and deletes find a password whether it is synced or local, as the keychain CLI
does, so one that arrived from another device of the sync circle is found here too. New
passwords are local unless the backend's `synchronizable` property is true: set it with
KeychaindKeyring(synchronizable=True), or with keyring's KEYRING_PROPERTY_SYNCHRONIZABLE=1.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from keyring import credentials, errors
from keyring.backend import KeyringBackend

try:  # keyring >= 23 takes classproperty from jaraco.classes
    from jaraco.classes.properties import classproperty
except ImportError:  # older keyring
    from keyring.util.properties import ClassProperty as classproperty  # type: ignore

from . import SYNCHRONIZABLE_ANY, Connection, KeychainError, Status

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _flag(value: Union[bool, str]) -> bool:
    # Properties from KEYRING_PROPERTY_* arrive as strings.
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("synchronizable is a boolean (1/true/yes/on or 0/false/no/off), not %r" % (value,))


def _locked_error():
    # KeyringLocked exists in keyring 23.9 and later.
    return getattr(errors, "KeyringLocked", errors.KeyringError)


class KeychaindKeyring(KeyringBackend):
    """keyring backend over a keychaind socket."""

    def __init__(self, socket_path: Optional[str] = None, trust_uid: Union[int, str, None] = None,
                 synchronizable: Union[bool, str, None] = None) -> None:
        # trust_uid: a daemon uid (or user name) to trust besides root and the caller; default
        # $KEYCHAIN_TRUST_UID (see Connection). synchronizable: see the property; None leaves
        # it to $KEYRING_PROPERTY_SYNCHRONIZABLE, read here too because keyring versions
        # without KeyringBackend.set_properties_from_env do not apply it.
        self._synchronizable = False
        super().__init__()
        if synchronizable is None:
            synchronizable = os.environ.get("KEYRING_PROPERTY_SYNCHRONIZABLE")
        if synchronizable is not None:
            self.synchronizable = synchronizable
        self.connection = Connection(socket_path, trust_uid=trust_uid)

    @property
    def synchronizable(self) -> bool:
        """Whether set_password makes a new password synced to the daemon's sync circle
        (kSecAttrSynchronizable). A password that exists already keeps its kind."""
        return self._synchronizable

    @synchronizable.setter
    def synchronizable(self, value: Union[bool, str]) -> None:
        self._synchronizable = _flag(value)

    @classproperty
    def priority(cls):
        # Preferred when a keychaind answers; not viable otherwise. A socket file alone proves
        # nothing: a daemon that exited (or was killed) leaves it behind.
        with Connection(timeout=2.0) as probe:
            try:
                probe.status()
            except KeychainError as e:
                raise RuntimeError("keychaind does not answer: %s" % e.message) from None
        return 9

    def close(self) -> None:
        self.connection.close()

    @staticmethod
    def _translate(e, error=errors.KeyringError):
        # A locked keychain is KeyringLocked whatever the call, with the hint; other failures
        # are `error` with keychaind's message, which names the socket when it is unreachable.
        if e.status == Status.INTERACTION_NOT_ALLOWED:
            return _locked_error()("the keychain is locked: run `keychain unlock`")
        return error(str(e))

    def get_password(self, service: str, username: str) -> Optional[str]:
        try:
            secret = self.connection.get_password(service, username, synchronizable=SYNCHRONIZABLE_ANY)
        except KeychainError as e:
            raise self._translate(e) from None
        return None if secret is None else secret.decode("utf-8")

    def set_password(self, service: str, username: str, password: str) -> None:
        # The password that exists, synced or local, is changed in place (a synced one then
        # changes on every device); only a new one takes this backend's kind. Adding first
        # would leave a local and a synced password side by side, and reads see both.
        item = {"class": "genp", "svce": service, "acct": username}
        data = {"v_Data": password.encode("utf-8")}
        try:
            for _ in range(2):
                try:
                    self.connection.update(item, data, synchronizable=SYNCHRONIZABLE_ANY)
                    return
                except KeychainError as e:
                    if e.status != Status.ITEM_NOT_FOUND:
                        raise
                try:
                    self.connection.add(dict(item, **data), synchronizable=self._synchronizable)
                    return
                except KeychainError as e:
                    # Added by someone else between the two calls: change that one instead.
                    if e.status != Status.DUPLICATE_ITEM:
                        raise
            raise KeychainError(Status.DUPLICATE_ITEM, "the password for %s / %s changed while it was being set"
                                % (service, username))
        except KeychainError as e:
            raise self._translate(e, errors.PasswordSetError) from None

    def delete_password(self, service: str, username: str) -> None:
        # Proceeds while the keychain is locked, as SecItemDelete does on Apple's platforms:
        # deleting needs no class key (the service and account are matched without opening
        # the item).
        try:
            self.connection.delete_password(service, username, synchronizable=SYNCHRONIZABLE_ANY)
        except KeychainError as e:
            if e.status == Status.ITEM_NOT_FOUND:
                raise errors.PasswordDeleteError("no password for %s / %s" % (service, username)) from None
            raise self._translate(e, errors.PasswordDeleteError) from None

    def get_credential(self, service: str, username: Optional[str]) -> Optional[credentials.SimpleCredential]:
        query = {"class": "genp", "svce": service, "sync": SYNCHRONIZABLE_ANY, "r_Attributes": True, "r_Data": True}
        if username is not None:
            query["acct"] = username
        try:
            found = self.connection.copy_matching(query)
        except KeychainError as e:
            if e.status == Status.ITEM_NOT_FOUND:
                return None
            raise self._translate(e) from None
        account = found.get("acct", "")
        if isinstance(account, bytes):
            account = account.decode("utf-8", "replace")
        return credentials.SimpleCredential(account, found["v_Data"].decode("utf-8"))
