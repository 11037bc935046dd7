"""Synchronizable items and the sync calls (docs/sync.md 7.4, docs/protocol.md operations 32-39),
with Apple's kSecAttrSynchronizable rules (reference/keychain-semantics.md)."""

import glob
import os
import shutil
import subprocess

import keyring
import pytest

from keychaind_client import SYNCHRONIZABLE_ANY, Connection, KeychainError, Status, SyncStatus
from keychaind_client.keyring_backend import KeychaindKeyring

HERE = os.path.dirname(os.path.abspath(__file__))
PG_CLUSTER = os.path.join(HERE, "..", "..", "..", "scripts", "pg-cluster")
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


def test_an_updates_changes_can_make_a_local_item_synced(conn):
    conn.set_password("sync.example.com", "alice", "moved")
    conn.update(ITEM, {"sync": True})
    assert conn.get_password("sync.example.com", "alice") is None
    assert conn.get_password("sync.example.com", "alice", synchronizable=True) == b"moved"


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


# -- the sync calls on daemons in no circle --

def test_without_a_sync_section_the_sync_calls_are_not_available_naming_the_setting(conn):
    for call in (conn.sync_status, conn.sync_now, conn.sync_devices):
        with pytest.raises(KeychainError) as e:
            call()
        assert e.value.status == Status.NOT_AVAILABLE
        assert "[sync]" in e.value.message and "database" in e.value.message


def test_a_daemon_with_a_database_but_in_no_circle_reports_state_off(start_daemon):
    # Nothing listens on port 1: a status outside a circle never connects.
    d = start_daemon('\n[sync]\ndatabase = "host=127.0.0.1 port=1 dbname=keychaind user=keychaind"\n')
    with Connection(d.socket) as c:
        status = c.sync_status()
        assert isinstance(status, SyncStatus)
        assert (status.state, status.loop, status.circle, status.members) == ("off", "off", None, 0)
        assert status.last_pass is None and status.pushed == 0
        with pytest.raises(KeychainError) as e:
            c.sync_now()
        assert e.value.status == Status.NOT_AVAILABLE


# -- the keyring backend --

def stored(daemon):
    with Connection(daemon.socket) as c:
        return c.copy_matching({"class": "genp", "svce": "pypi", "acct": "alice", "r_Attributes": True,
                                "m_Limit": "m_LimitAll"}, synchronizable=SYNCHRONIZABLE_ANY)


def test_the_keyring_backend_stores_local_passwords_unless_told_synchronizable(daemon):
    KeychaindKeyring(daemon.socket).set_password("pypi", "alice", "local")
    assert [a["sync"] for a in stored(daemon)] == [0]
    KeychaindKeyring(daemon.socket).delete_password("pypi", "alice")
    kr = KeychaindKeyring(daemon.socket, synchronizable=True)
    kr.set_password("pypi", "alice", "synced")
    assert [a["sync"] for a in stored(daemon)] == [1]
    assert kr.get_password("pypi", "alice") == "synced"


def test_keyrings_property_variable_makes_the_backend_synchronizable(daemon, monkeypatch):
    monkeypatch.setenv("KEYRING_PROPERTY_SYNCHRONIZABLE", "1")
    kr = KeychaindKeyring(daemon.socket)
    assert kr.synchronizable is True
    kr.set_password("pypi", "alice", "synced")
    assert [a["sync"] for a in stored(daemon)] == [1]
    monkeypatch.setenv("KEYRING_PROPERTY_SYNCHRONIZABLE", "sometimes")
    with pytest.raises(ValueError):
        KeychaindKeyring(daemon.socket)


def test_the_keyring_backend_finds_changes_and_deletes_a_synced_password_without_adding_a_local_one(daemon):
    with Connection(daemon.socket) as c:
        c.set_password("pypi", "alice", "from-another-device", synchronizable=True)
    kr = KeychaindKeyring(daemon.socket)
    previous = keyring.get_keyring()
    keyring.set_keyring(kr)
    try:
        assert keyring.get_password("pypi", "alice") == "from-another-device"
        assert keyring.get_credential("pypi", None).password == "from-another-device"
        keyring.set_password("pypi", "alice", "changed")
        assert [a["sync"] for a in stored(daemon)] == [1]
        assert keyring.get_password("pypi", "alice") == "changed"
        keyring.delete_password("pypi", "alice")
        assert keyring.get_password("pypi", "alice") is None
    finally:
        keyring.set_keyring(previous)
        kr.close()


# -- two daemons, one PostgreSQL cluster (scripts/pg-cluster) --

def _have_postgresql():
    return shutil.which("initdb") is not None or bool(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


@pytest.fixture
def cluster(tmp_path):
    """A throw-away PostgreSQL cluster: (port, password); removed after the test."""
    if not _have_postgresql():
        pytest.skip("no PostgreSQL server binaries (the postgresql package; scripts/install-deps)")
    # The script's output goes to a file, not a pipe: the server it starts must hold no pipe of ours.
    out = tmp_path / "pg-cluster.out"
    with open(str(out), "w") as f:
        subprocess.run([PG_CLUSTER, "start"], stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                       check=True, timeout=120)
    values = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    directory = values["PGCLUSTER_DIR"]
    try:
        with open(os.path.join(directory, "port")) as f:
            port = f.read().strip()
        with open(os.path.join(directory, "password")) as f:
            password = f.read().strip()
        yield port, password
    finally:
        subprocess.run([PG_CLUSTER, "stop", directory], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)


def sync_config(cluster, tmp_path):
    """The [sync] section of a daemon on cluster, its password in a 0600 passfile."""
    port, password = cluster
    passfile = tmp_path / "pgpass"
    if not passfile.exists():
        passfile.write_text("127.0.0.1:%s:keychaind:keychaind:%s\n" % (port, password))
        os.chmod(str(passfile), 0o600)
    return '\n[sync]\ndatabase = "host=127.0.0.1 port=%s dbname=keychaind user=keychaind passfile=%s"\n' % (
        port, passfile)


def test_a_password_set_synchronizable_on_one_daemon_is_read_on_another_after_sync_now(cluster, tmp_path, start_daemon):
    config = sync_config(cluster, tmp_path)
    with Connection(start_daemon(config).socket) as a, Connection(start_daemon(config).socket) as b:
        circle = a.sync_create("a").circle
        joined = b.sync_join(circle, "b")
        assert joined.circle == circle and b.sync_status().state == "pending"
        approved = a.sync_approve(joined.device)
        assert approved.name == "b" and approved.member
        assert b.sync_status().state == "member"
        assert [(d.name, d.member) for d in a.sync_devices()] == [("a", True), ("b", True)]

        a.set_password("sync.example.com", "alice", "deploy-token", synchronizable=True)
        a.sync_now()
        b.sync_now()
        assert b.get_password("sync.example.com", "alice", synchronizable=True) == b"deploy-token"
        assert b.get_password("sync.example.com", "alice") is None  # synced items only when asked for

        status = a.sync_status()
        assert (status.state, status.loop, status.pushed, status.outbox) == ("member", "ok", 1, 0)
        assert status.last_pass is not None and status.last_pass.to_datetime().year >= 2025
        assert (status.rollbacks_healed, status.heads_rejected, status.last_rollback) == (0, 0, None)
        assert b.sync_status().applied == 1

        removal = a.sync_remove(joined.device)
        assert removal.device == joined.device and removal.epoch == 2
        assert b.sync_status().state == "removed"
        a.sync_leave()
        assert a.sync_status().state == "off"
