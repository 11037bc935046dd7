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
