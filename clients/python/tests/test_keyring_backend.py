import os
import socket
import subprocess
import sys

import keyring
import pytest
from keyring import errors

from keychaind_client import Connection
from keychaind_client.keyring_backend import KeychaindKeyring


@pytest.fixture
def backend(daemon):
    kr = KeychaindKeyring(daemon.socket)
    previous = keyring.get_keyring()
    keyring.set_keyring(kr)
    yield kr
    keyring.set_keyring(previous)


def test_set_get_and_delete_through_keyring(backend):
    assert keyring.get_password("pypi", "alice") is None
    keyring.set_password("pypi", "alice", "s3cret")
    keyring.set_password("pypi", "alice", "s3cret-2")
    assert keyring.get_password("pypi", "alice") == "s3cret-2"
    keyring.delete_password("pypi", "alice")
    assert keyring.get_password("pypi", "alice") is None


def test_deleting_a_missing_password_raises_password_delete_error(backend):
    with pytest.raises(errors.PasswordDeleteError):
        keyring.delete_password("pypi", "nobody")


def test_get_credential_with_and_without_a_username(backend):
    keyring.set_password("registry", "bob", "pw")
    cred = keyring.get_credential("registry", None)
    assert cred.username == "bob" and cred.password == "pw"
    assert keyring.get_credential("registry", "bob").password == "pw"
    assert keyring.get_credential("registry", "carol") is None


def test_a_password_set_through_keyring_is_a_keychain_item(backend, daemon):
    keyring.set_password("svc", "me", "visible")
    assert Connection(daemon.socket).copy_matching(
        {"class": "genp", "svce": "svc", "acct": "me", "r_Data": True}) == b"visible"


def test_a_locked_keychain_raises_a_keyring_error(backend, daemon):
    keyring.set_password("svc", "me", "x")
    c = Connection(daemon.socket)
    c.set_passcode("1234")
    c.lock()
    with pytest.raises(errors.KeyringError) as e:
        keyring.get_password("svc", "me")
    assert "unlock" in str(e.value)


def test_the_backend_is_viable_only_where_a_socket_exists(daemon, monkeypatch):
    monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
    assert KeychaindKeyring.priority > 0
    monkeypatch.setenv("KEYCHAIN_SOCKET", "/tmp/no-such-keychaind.sock")
    with pytest.raises(RuntimeError):
        KeychaindKeyring.priority


def locked(daemon):
    c = Connection(daemon.socket)
    c.set_passcode("1234")
    c.lock()
    c.close()


def unlocked(daemon):
    c = Connection(daemon.socket)
    c.unlock("1234")
    c.close()


def test_a_locked_keychain_on_set_password_raises_keyring_locked_with_the_unlock_hint(backend, daemon):
    keyring.set_password("svc", "me", "x")
    locked(daemon)
    expected = getattr(errors, "KeyringLocked", errors.KeyringError)
    with pytest.raises(expected) as e:
        keyring.set_password("svc", "me", "y")
    assert "keychain unlock" in str(e.value)
    assert " ak " not in " %s " % e.value  # says when-unlocked, or nothing, never the pdmn code


def test_delete_password_proceeds_while_the_keychain_is_locked(backend, daemon):
    # Apple's rule: SecItemDelete needs no class key, so it works while locked.
    keyring.set_password("svc", "me", "x")
    locked(daemon)
    keyring.delete_password("svc", "me")
    unlocked(daemon)
    assert keyring.get_password("svc", "me") is None


def test_the_backend_is_not_viable_when_a_stale_socket_file_has_no_daemon(tmp_path, monkeypatch):
    stale = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(stale)  # the file stays after close, as after a daemon killed with SIGKILL
    s.close()
    monkeypatch.setenv("KEYCHAIN_SOCKET", stale)
    with pytest.raises(RuntimeError):
        KeychaindKeyring.priority


@pytest.mark.parametrize("call", [
    lambda kr: kr.get_password("svc", "me"),
    lambda kr: kr.set_password("svc", "me", "x"),
    lambda kr: kr.delete_password("svc", "me"),
    lambda kr: kr.get_credential("svc", None),
], ids=["get", "set", "delete", "get_credential"])
def test_a_missing_daemon_is_a_keyring_error_naming_the_socket(tmp_path, call):
    missing = str(tmp_path / "no-daemon.sock")
    kr = KeychaindKeyring(missing)
    with pytest.raises(errors.KeyringError) as e:
        call(kr)
    assert missing in str(e.value) and "KEYCHAIN_SOCKET" in str(e.value)
    kr.close()


def test_sockets_are_closed_so_nothing_warns_at_exit(daemon):
    # As a program uses keyring: a backend that lives until exit, and a connection dropped
    # without close().
    script = (
        "import keyring\n"
        "from keychaind_client import Connection\n"
        "from keychaind_client.keyring_backend import KeychaindKeyring\n"
        "keyring.set_keyring(KeychaindKeyring(%r))\n"
        "keyring.set_password('svc', 'me', 'x')\n"
        "assert keyring.get_password('svc', 'me') == 'x'\n"
        "Connection(%r).status()\n"
        "KeychaindKeyring.priority\n" % (daemon.socket, daemon.socket))
    env = dict(os.environ, KEYCHAIN_SOCKET=daemon.socket)
    run = subprocess.run([sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script],
                         capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "ResourceWarning" not in run.stderr and "unclosed" not in run.stderr, run.stderr
