"""A CI job's keyring tests, run inside `keychain run` (scripts/test-python runs this file with
and without --secret-service): the throw-away keychain is reached through KEYCHAIN_SOCKET with
the keychaind backend, and through the private session bus with keyring's own SecretService
backend. Outside `keychain run` these tests fail: they are not meant to run there."""

import os

import keyring
import pytest

from keychaind_client.keyring_backend import KeychaindKeyring


SECRET_SERVICE = os.environ.get("KEYCHAIN_RUN_SECRET_SERVICE") == "1"


def make(name):
    assert os.environ.get("KEYCHAIN_SOCKET"), "run this file inside `keychain run`"
    if name == "keychaind":
        return KeychaindKeyring()
    assert os.environ.get("DBUS_SESSION_BUS_ADDRESS"), "run with `keychain run --secret-service`"
    from keyring.backends.SecretService import Keyring as SecretServiceKeyring
    return SecretServiceKeyring()


@pytest.fixture(params=["keychaind"] + (["secret-service"] if SECRET_SERVICE else []))
def backend(request):
    previous = keyring.get_keyring()
    chosen = make(request.param)
    keyring.set_keyring(chosen)
    yield chosen
    keyring.set_keyring(previous)


def test_the_keychain_starts_empty(backend):
    assert keyring.get_password("ci.example.com", "bot") is None


def test_set_get_change_and_delete(backend):
    keyring.set_password("ci.example.com", "deployer", "token-1")
    keyring.set_password("ci.example.com", "deployer", "token-2")
    assert keyring.get_password("ci.example.com", "deployer") == "token-2"
    keyring.delete_password("ci.example.com", "deployer")
    assert keyring.get_password("ci.example.com", "deployer") is None
