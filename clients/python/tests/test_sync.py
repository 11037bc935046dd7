"""Synchronizable items and the sync calls (docs/sync.md 7.4, docs/protocol.md operations 32-39),
with Apple's kSecAttrSynchronizable rules (reference/keychain-semantics.md)."""

import pytest

from keychaind_client import SYNCHRONIZABLE_ANY, KeychainError, Status

ITEM = {"class": "genp", "svce": "sync.example.com", "acct": "alice"}


def attributes(conn, synchronizable):
    return conn.copy_matching(dict(ITEM, r_Attributes=True, m_Limit="m_LimitAll"), synchronizable=synchronizable)


# -- the attribute --

def test_a_synchronizable_add_comes_back_with_sync_set_and_its_secret(conn):
    conn.add(dict(ITEM, v_Data=b"synced"), synchronizable=True)
    found = conn.copy_matching(dict(ITEM, r_Attributes=True, r_Data=True), synchronizable=True)
    assert found["sync"] == 1 and found["v_Data"] == b"synced"


def test_a_query_without_synchronizable_matches_local_items_only(conn):
    conn.set_password("sync.example.com", "alice", "synced", synchronizable=True)
    assert conn.get_password("sync.example.com", "alice") is None
    conn.set_password("sync.example.com", "alice", "local")
    assert conn.get_password("sync.example.com", "alice") == b"local"
    assert conn.get_password("sync.example.com", "alice", synchronizable=False) == b"local"
    assert conn.get_password("sync.example.com", "alice", synchronizable=True) == b"synced"


def test_any_matches_synced_and_local_items_and_each_result_says_which(conn):
    conn.add(dict(ITEM, v_Data=b"local"))
    conn.add(dict(ITEM, v_Data=b"synced"), synchronizable=True)
    assert sorted(a["sync"] for a in attributes(conn, SYNCHRONIZABLE_ANY)) == [0, 1]
    assert sorted(a["sync"] for a in attributes(conn, "any")) == [0, 1]
    assert [a["sync"] for a in attributes(conn, None)] == [0]
    assert [a["sync"] for a in attributes(conn, True)] == [1]


def test_update_and_delete_touch_only_the_kind_synchronizable_selects(conn):
    conn.set_password("sync.example.com", "alice", "local")
    conn.set_password("sync.example.com", "alice", "synced", synchronizable=True)
    conn.update(ITEM, {"v_Data": b"synced-2"}, synchronizable=True)
    assert conn.get_password("sync.example.com", "alice") == b"local"
    assert conn.get_password("sync.example.com", "alice", synchronizable=True) == b"synced-2"

    conn.delete_password("sync.example.com", "alice", synchronizable=True)
    assert conn.get_password("sync.example.com", "alice", synchronizable=True) is None
    assert conn.get_password("sync.example.com", "alice") == b"local"

    conn.set_password("sync.example.com", "alice", "synced-3", synchronizable=True)
    conn.delete(ITEM, synchronizable=SYNCHRONIZABLE_ANY)
    with pytest.raises(KeychainError) as e:
        attributes(conn, SYNCHRONIZABLE_ANY)
    assert e.value.status == Status.ITEM_NOT_FOUND


@pytest.mark.parametrize("accessible", ["when-unlocked-this-device-only", "after-first-unlock-this-device-only",
                                        "always-this-device-only", "when-passcode-set-this-device-only"])
def test_a_this_device_only_class_with_synchronizable_is_refused_by_the_daemon(conn, accessible):
    with pytest.raises(KeychainError) as e:
        conn.set_password("sync.example.com", "alice", "x", accessible=accessible, synchronizable=True)
    assert e.value.status == Status.PARAM
    assert conn.get_password("sync.example.com", "alice", synchronizable=SYNCHRONIZABLE_ANY) is None


def test_an_update_that_would_make_a_this_device_only_item_synced_is_refused(conn):
    conn.set_password("sync.example.com", "alice", "x", accessible="after-first-unlock-this-device-only")
    with pytest.raises(KeychainError) as e:
        conn.update(ITEM, {"sync": True})
    assert e.value.status == Status.PARAM
    assert attributes(conn, SYNCHRONIZABLE_ANY)[0]["sync"] == 0


def test_any_is_for_searches_only(conn):
    with pytest.raises(KeychainError) as e:
        conn.add(dict(ITEM, v_Data=b"x"), synchronizable=SYNCHRONIZABLE_ANY)
    assert e.value.status == Status.PARAM


def test_synchronizable_given_twice_or_as_something_else_is_a_value_error(conn):
    with pytest.raises(ValueError):
        conn.add(dict(ITEM, sync=True), synchronizable=True)
    with pytest.raises(ValueError):
        conn.copy_matching(ITEM, synchronizable="yes")
    with pytest.raises(ValueError):
        conn.delete(ITEM, synchronizable=1)
