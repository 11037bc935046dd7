"""What keychaind's sync calls answer (docs/protocol.md, operations 32-39; docs/sync.md 7.4),
as typed values. The calls themselves are Connection.sync_status, sync_now, sync_devices and
the admin ones (sync_create, sync_join, sync_approve, sync_remove, sync_leave).

Absent keys take the defaults the Swift client's SyncStatus gives them, so an older daemon
that sends fewer of them still yields a complete value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from . import AbsoluteTime, KeychainError, Status


def _int(a: Dict[str, Any], key: str) -> int:
    value = a.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _str(a: Dict[str, Any], key: str) -> Optional[str]:
    value = a.get(key)
    return value if isinstance(value, str) else None


def _attributes(answer: Any, call: str) -> Dict[str, Any]:
    if not isinstance(answer, dict):
        raise KeychainError(Status.DECODE, "keychaind's %s answer has an unexpected shape" % call)
    return answer


@dataclass(frozen=True)
class SyncStatus:
    """This device's sync state, as `keychain sync status` shows it."""
    #: off, waitingForUnlock, pending, member, removed or forked.
    state: str
    #: The sync thread: off, waitingForUnlock, pending, connecting, ok, error, forked,
    #: rolledBack (the database went back in time; healing) or partitioned.
    loop: str
    epoch: int
    members: int
    #: Local changes waiting to be pushed.
    outbox: int
    #: Pulled records waiting for their class key (when-unlocked items while locked).
    inbox: int
    #: The 32 digits a joining device types; None outside a circle.
    circle: Optional[str]
    #: The 32 digits a member types to approve this device; None before its identity exists.
    device: Optional[str]
    #: Since keychaind started: records pushed, pulled, applied here, and refused.
    pushed: int
    pulled: int
    applied: int
    rejected: int
    #: When the sync thread's last pass succeeded; None before the first. The wire carries
    #: milliseconds since 2001; this is the same instant as an AbsoluteTime.
    last_pass: Optional[AbsoluteTime]
    last_error: Optional[str]
    #: Since keychaind started: database rollbacks found and healed, and heads in the
    #: database whose signature did not verify; the reason of the last rollback found.
    rollbacks_healed: int = 0
    heads_rejected: int = 0
    last_rollback: Optional[str] = None

    @classmethod
    def _from_answer(cls, answer: Any) -> SyncStatus:
        a = _attributes(answer, "sync status")
        last_pass = a.get("last_pass")
        return cls(state=_str(a, "state") or "", loop=_str(a, "loop") or "off", epoch=_int(a, "epoch"),
                   members=_int(a, "members"), outbox=_int(a, "outbox"), inbox=_int(a, "inbox"),
                   circle=_str(a, "circle"), device=_str(a, "device"), pushed=_int(a, "pushed"),
                   pulled=_int(a, "pulled"), applied=_int(a, "applied"), rejected=_int(a, "rejected"),
                   last_pass=AbsoluteTime(last_pass / 1000.0) if isinstance(last_pass, int) else None,
                   last_error=_str(a, "last_error"), rollbacks_healed=_int(a, "rollbacks_healed"),
                   heads_rejected=_int(a, "heads_rejected"), last_rollback=_str(a, "last_rollback"))


@dataclass(frozen=True)
class SyncDevice:
    """One device of the circle, a member or waiting for approval."""
    #: 32 lowercase hex digits.
    id: str
    fingerprint: str
    name: str
    member: bool

    @classmethod
    def _from_answer(cls, answer: Any) -> SyncDevice:
        a = _attributes(answer, "sync device")
        return cls(id=_str(a, "id") or "", fingerprint=_str(a, "fingerprint") or "", name=_str(a, "name") or "",
                   member=a.get("member") is True)


@dataclass(frozen=True)
class SyncFingerprints:
    """What founding or joining a circle answered: the circle's digits and this device's."""
    circle: str
    device: str

    @classmethod
    def _from_answer(cls, answer: Any) -> SyncFingerprints:
        a = _attributes(answer, "sync create or join")
        return cls(circle=_str(a, "circle") or "", device=_str(a, "device") or "")


@dataclass(frozen=True)
class SyncRemoval:
    """What removing a device did: the device, the epoch its removal started, and the records
    re-sealed under the new circle key or dropped."""
    device: str
    epoch: int
    resealed: int
    dropped: int

    @classmethod
    def _from_answer(cls, answer: Any) -> SyncRemoval:
        a = _attributes(answer, "sync remove")
        return cls(device=_str(a, "device") or "", epoch=_int(a, "epoch"), resealed=_int(a, "resealed"),
                   dropped=_int(a, "dropped"))
