"""kSecAttrAccessControl: items that ask the person first (docs/security.md, "Items that ask
first"). On the wire an item's "accc" is a string, its pdmn code and, with constraints, ";" and
Apple's SecAccessControlCreateFlags as a decimal number ("ak;1")."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Union

from . import ACCESSIBLE, KeychainError, Status, _pdmn


class AccessControl:
    """A protection class with constraints, as SecAccessControlCreateWithFlags makes one.
    Refused here with the code keychaind gives (Status.PARAM for a combination Apple refuses,
    Status.NOT_AVAILABLE for biometry and companion devices, which this machine has not), so a
    bad value fails before a secret is sent; keychaind checks again and stays the judge."""

    # SecAccessControlCreateFlags, Apple's values.
    USER_PRESENCE = 1 << 0
    BIOMETRY_ANY = 1 << 1
    BIOMETRY_CURRENT_SET = 1 << 3
    DEVICE_PASSCODE = 1 << 4
    WATCH = COMPANION = 1 << 5
    OR = 1 << 14
    AND = 1 << 15
    PRIVATE_KEY_USAGE = 1 << 30
    APPLICATION_PASSWORD = 1 << 31

    _ALL = (USER_PRESENCE | BIOMETRY_ANY | BIOMETRY_CURRENT_SET | DEVICE_PASSCODE | COMPANION | OR | AND
            | PRIVATE_KEY_USAGE | APPLICATION_PASSWORD)
    _ABSENT_DEVICES = BIOMETRY_ANY | BIOMETRY_CURRENT_SET | COMPANION

    def __init__(self, protection: str = "when-unlocked", flags: int = 0) -> None:
        self.protection = _pdmn(protection)
        self.flags = int(flags)
        # keychaind's order (docs/semantics.md, accc): unknown bits, userPresence's company,
        # Or with And, then devices this machine has not.
        if self.flags < 0 or self.flags & ~self._ALL:
            raise KeychainError(Status.PARAM, "accc flags %d include bits that are no SecAccessControlCreateFlags" % self.flags)
        if self.flags & self.USER_PRESENCE and self.flags & ~(self.USER_PRESENCE | self.APPLICATION_PASSWORD | self.PRIVATE_KEY_USAGE):
            raise KeychainError(Status.PARAM, "userPresence (1) combines only with applicationPassword and privateKeyUsage")
        if self.flags & self.OR and self.flags & self.AND:
            raise KeychainError(Status.PARAM, "accc flags may hold Or (16384) or And (32768), not both")
        if self.flags & self._ABSENT_DEVICES:
            raise KeychainError(Status.NOT_AVAILABLE, "biometry and companion-device (watch) constraints need a device "
                                                      "this machine does not have; use userPresence or devicePasscode")

    @classmethod
    def required(cls, require: Union[str, Iterable[str]], protection: str = "when-unlocked") -> AccessControl:
        """From the keychain CLI's --require names: "presence", "passcode", "app-password", or
        several (a comma-separated str or an iterable)."""
        names = require.split(",") if isinstance(require, str) else list(require)
        flags = 0
        for name in names:
            if name not in REQUIRE:
                raise ValueError("require takes %s, not %r" % (", ".join(REQUIRE), name))
            flags |= REQUIRE[name]
        return cls(protection, flags)

    @classmethod
    def from_attributes(cls, attributes: Dict[str, Any]) -> Optional[AccessControl]:
        """An item's access control from its r_Attributes: its "accc", else its "pdmn" with no
        constraints; None with neither."""
        accc = attributes.get("accc")
        if isinstance(accc, str):
            pdmn, _, flags = accc.partition(";")
            return cls(pdmn, int(flags) if flags else 0)
        pdmn = attributes.get("pdmn")
        return cls(pdmn) if isinstance(pdmn, str) else None

    @property
    def asks_first(self) -> bool:
        """Whether reading the secret asks the person at the machine (the keychain passcode)."""
        return bool(self.flags & (self.USER_PRESENCE | self.DEVICE_PASSCODE))

    @property
    def value(self) -> str:
        """The "accc" string of an add dictionary."""
        return "%s;%d" % (self.protection, self.flags) if self.flags else self.protection

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AccessControl) and (self.protection, self.flags) == (other.protection, other.flags)

    def __hash__(self) -> int:
        return hash((self.protection, self.flags))

    def __repr__(self) -> str:
        name = next((n for n, code in ACCESSIBLE.items() if code == self.protection), self.protection)
        return "AccessControl(%r, %d)" % (name, self.flags)


#: The keychain CLI's --require names.
REQUIRE = {
    "presence": AccessControl.USER_PRESENCE,
    "passcode": AccessControl.DEVICE_PASSCODE,
    "app-password": AccessControl.APPLICATION_PASSWORD,
}

#: kSecUseAuthenticationUI: what a read does when an item would ask the person.
AUTH_UI = {"allow": "u_AuthUIA", "fail": "u_AuthUIF", "skip": "u_AuthUIS"}


def with_access_control(attributes: Dict[str, Any], access_control: Union[AccessControl, str, None],
                        require: Union[str, Iterable[str], None]) -> Dict[str, Any]:
    """An add's attributes with "accc" set from access_control= or require= (a copy)."""
    if access_control is None and require is None:
        return attributes
    if access_control is not None and require is not None:
        raise ValueError("give access_control= or require=, not both")
    if "accc" in attributes:
        raise ValueError("give kSecAttrAccessControl once: the dictionary's \"accc\" or access_control=/require=, not both")
    attributes = dict(attributes)
    # The class travels inside accc: pdmn beside constraints is errSecParam.
    pdmn = attributes.pop("pdmn", None)
    if require is not None:
        control = AccessControl.required(require, pdmn or "ak")
    else:
        control = AccessControl.from_attributes({"accc": access_control}) if isinstance(access_control, str) else access_control
        if pdmn is not None and _pdmn(pdmn) != control.protection:
            raise KeychainError(Status.PARAM, "conflicting kSecAttrAccessible (pdmn) and kSecAttrAccessControl (accc)")
    if control.flags and attributes.get("sync") in (True, 1):
        raise KeychainError(Status.PARAM, "a synchronizable item (sync = 1) cannot have access-control constraints")
    attributes["accc"] = control.value
    return attributes


def with_auth_ui(query: Dict[str, Any], auth_ui: Optional[str], reason: Optional[str]) -> Dict[str, Any]:
    """A read's query with u_AuthUI (auth_ui "allow", "fail" or "skip") and u_OpPrompt (a copy)."""
    if auth_ui is None and reason is None:
        return query
    query = dict(query)
    if auth_ui is not None:
        if auth_ui not in AUTH_UI:
            raise ValueError("auth_ui is one of %s, not %r" % (", ".join(AUTH_UI), auth_ui))
        query["u_AuthUI"] = AUTH_UI[auth_ui]
    if reason is not None:
        query["u_OpPrompt"] = reason
    return query
