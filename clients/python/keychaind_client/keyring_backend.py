"""A backend for the `keyring` library that keeps passwords in keychaind.

    import keyring
    from keychaind_client.keyring_backend import KeychaindKeyring
    keyring.set_keyring(KeychaindKeyring())

or, once this package is installed, `keyring` finds it by its entry point. Passwords are
generic-password items: service -> svce, username -> acct, the password (UTF-8) -> the secret,
in the caller's default access group.
"""

from __future__ import annotations

from typing import Optional, Union

from keyring import credentials, errors
from keyring.backend import KeyringBackend

try:  # keyring >= 23 takes classproperty from jaraco.classes
    from jaraco.classes.properties import classproperty
except ImportError:  # older keyring
    from keyring.util.properties import ClassProperty as classproperty  # type: ignore

from . import Connection, KeychainError, Status


def _locked_error():
    # KeyringLocked exists in keyring 23.9 and later.
    return getattr(errors, "KeyringLocked", errors.KeyringError)


class KeychaindKeyring(KeyringBackend):
    """keyring backend over a keychaind socket."""

    def __init__(self, socket_path: Optional[str] = None, trust_uid: Union[int, str, None] = None) -> None:
        # trust_uid: a daemon uid (or user name) to trust besides root and the caller; default
        # $KEYCHAIN_TRUST_UID (see Connection).
        super().__init__()
        self.connection = Connection(socket_path, trust_uid=trust_uid)

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
            secret = self.connection.get_password(service, username)
        except KeychainError as e:
            raise self._translate(e) from None
        return None if secret is None else secret.decode("utf-8")

    def set_password(self, service: str, username: str, password: str) -> None:
        try:
            self.connection.set_password(service, username, password)
        except KeychainError as e:
            raise self._translate(e, errors.PasswordSetError) from None

    def delete_password(self, service: str, username: str) -> None:
        # Proceeds while the keychain is locked, as SecItemDelete does on Apple's platforms:
        # deleting needs no class key (the service and account are matched without opening
        # the item).
        try:
            self.connection.delete_password(service, username)
        except KeychainError as e:
            if e.status == Status.ITEM_NOT_FOUND:
                raise errors.PasswordDeleteError("no password for %s / %s" % (service, username)) from None
            raise self._translate(e, errors.PasswordDeleteError) from None

    def get_credential(self, service: str, username: Optional[str]) -> Optional[credentials.SimpleCredential]:
        query = {"class": "genp", "svce": service, "r_Attributes": True, "r_Data": True}
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
