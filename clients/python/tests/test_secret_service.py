"""Python keyring's SecretService backend, and git-credential-libsecret beside it, against the
real Secret Service bridge (keychain-secret-service) over a real keychaind, on a private
session bus: their secrets land in keychaind, and an [[app]] config keeps each to its own."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import secretstorage
from jeepney.io.blocking import open_dbus_connection
from keyring import errors
from keyring.backends import SecretService

from conftest import KEYCHAIND, Daemon

BIN = os.path.dirname(os.path.abspath(KEYCHAIND))
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
# keychaind knows a process by the executable the kernel ran: the venv's python is a link.
PYTHON = os.path.realpath(sys.executable)


class SessionBus:
    """A dbus-daemon of the test's own standing in for the session bus."""

    def __init__(self):
        self.root = tempfile.mkdtemp(prefix="kcbus.", dir="/tmp")
        self.address = "unix:path=" + os.path.join(self.root, "bus")
        with open(os.path.join(self.root, "bus.conf"), "w") as f:
            f.write("""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>session</type><listen>%s</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_destination="*"/>
<allow receive_sender="*"/></policy></busconfig>
""" % self.address)
        self.process = subprocess.Popen(
            ["dbus-daemon", "--config-file=" + os.path.join(self.root, "bus.conf"), "--nofork", "--nopidfile",
             "--print-address=1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        # It prints its address once it accepts connections.
        if not self.process.stdout.readline().startswith(b"unix:"):
            raise RuntimeError("dbus-daemon did not start")

    def stop(self):
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class SecretServiceSetup:
    """A bus, keychaind (with `config`) and the bridge on both; clients get `env`."""

    def __init__(self, config=""):
        self.bus = SessionBus()
        self.daemon = Daemon(config)
        self.home = tempfile.mkdtemp(prefix="kchome.", dir="/tmp")
        self.env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=self.bus.address, KEYCHAIN_SOCKET=self.daemon.socket,
                        HOME=self.home, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
        self.bridge_log = open(os.path.join(self.daemon.root, "bridge.log"), "wb")
        self.bridge = subprocess.Popen([os.path.join(BIN, "keychain-secret-service"), "--socket", self.daemon.socket],
                                       env=self.env, stdout=self.bridge_log, stderr=self.bridge_log)
        self.wait_for_bridge()

    def wait_for_bridge(self):
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.bridge.poll() is not None:
                raise RuntimeError("the bridge exited with %s" % self.bridge.returncode)
            connection = open_dbus_connection(self.bus.address)
            try:
                if secretstorage.check_service_availability(connection):
                    return
            finally:
                connection.close()
            time.sleep(0.05)
        raise RuntimeError("the bridge did not take org.freedesktop.secrets")

    def stop(self):
        self.bridge.kill()
        self.bridge.wait()
        self.bridge_log.close()
        self.daemon.stop()
        self.daemon.log.close()
        shutil.rmtree(self.daemon.root, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)
        self.bus.stop()

    def keychain_items(self):
        """`keychain list --json`: the Secret Service items as keychaind holds them."""
        out = subprocess.run([os.path.join(BIN, "keychain"), "list", "--json"], env=self.env, check=True,
                             capture_output=True).stdout
        return [item for item in json.loads(out) if item["svce"] == "secret-service:login"]

    def keyring_cli(self, *arguments, input=None):
        return subprocess.run([os.path.join(os.path.dirname(sys.executable), "keyring"),
                               "-b", "keyring.backends.SecretService.Keyring"] + list(arguments),
                              env=self.env, input=input, capture_output=True, text=True)

    def git_credential(self, action, lines):
        """`git credential ACTION` with git-credential-libsecret as its helper; a question git
        would ask a person is answered "asked" (and shows in the output)."""
        askpass = os.path.join(self.home, "askpass")
        if not os.path.exists(askpass):
            with open(askpass, "w") as f:
                f.write("#!/bin/sh\necho asked\n")
            os.chmod(askpass, 0o755)
        return subprocess.run(["git", "-c", "credential.helper=" + git_credential_libsecret(), "credential", action],
                              env=dict(self.env, GIT_ASKPASS=askpass), input="\n".join(lines) + "\n\n",
                              capture_output=True, text=True, check=True).stdout.splitlines()


def git_credential_libsecret():
    """Built from Debian's git source once, cached by source hash (scripts/build-git-credential-libsecret)."""
    out = subprocess.run([os.path.join(REPO, "scripts", "build-git-credential-libsecret")], check=True,
                         capture_output=True, text=True).stdout
    return os.path.realpath(out.strip())


@pytest.fixture
def secret_service(monkeypatch):
    s = SecretServiceSetup()
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", s.bus.address)
    yield s
    s.stop()


def confined_setup(monkeypatch):
    uid = os.getuid()
    s = SecretServiceSetup(config="""
[[app]]
id = "git"
uids = [%d]
executables = ["%s"]
groups = ["git.credentials"]
[[app]]
id = "python"
uids = [%d]
executables = ["%s"]
groups = ["python.keyring"]
""" % (uid, git_credential_libsecret(), uid, PYTHON))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", s.bus.address)
    return s


def test_the_secret_service_backend_sets_gets_and_deletes_a_password_kept_in_keychaind(secret_service):
    backend = SecretService.Keyring()
    assert backend.priority > 0  # keyring would choose it: the service answers on the bus
    assert backend.get_password("pypi", "alice") is None
    backend.set_password("pypi", "alice", "s3cret")
    backend.set_password("pypi", "alice", "s3cret-2")
    assert backend.get_password("pypi", "alice") == "s3cret-2"
    [item] = secret_service.keychain_items()  # replaced, not added
    assert item["labl"] == "Password for 'alice' on 'pypi'"
    backend.delete_password("pypi", "alice")
    assert backend.get_password("pypi", "alice") is None
    assert secret_service.keychain_items() == []


def test_the_secret_service_backend_fails_to_delete_a_missing_password(secret_service):
    with pytest.raises(errors.PasswordDeleteError):
        SecretService.Keyring().delete_password("pypi", "nobody")


def test_the_keyring_command_sets_gets_and_deletes_through_the_bridge(secret_service):
    assert secret_service.keyring_cli("set", "registry", "bob", input="from-the-cli\n").returncode == 0
    got = secret_service.keyring_cli("get", "registry", "bob")
    assert (got.returncode, got.stdout) == (0, "from-the-cli\n")
    assert [item["labl"] for item in secret_service.keychain_items()] == ["Password for 'bob' on 'registry'"]
    # The same item as the backend in this process sees.
    assert SecretService.Keyring().get_password("registry", "bob") == "from-the-cli"
    assert secret_service.keyring_cli("del", "registry", "bob").returncode == 0
    assert secret_service.keyring_cli("get", "registry", "bob").returncode == 1
    assert secret_service.keychain_items() == []


# Per-app confinement with the real clients: one [[app]] for git-credential-libsecret's
# executable, another for python3; each finds its own secrets and not the other's.

GIT_QUESTION = ["protocol=https", "host=shared.example"]
GIT_ATTRIBUTES = {"xdg:schema": "org.gnome.keyring.NetworkPassword", "protocol": "https", "server": "shared.example",
                  "user": "alice"}


def store_both(s):
    """git stores a credential; Python stores a keyring password and an item with the very
    attributes git-credential-libsecret looks for."""
    s.git_credential("approve", GIT_QUESTION + ["username=alice", "password=git's"])
    SecretService.Keyring().set_password("pypi", "alice", "python's")
    connection = secretstorage.dbus_init()
    try:
        secretstorage.get_default_collection(connection).create_item("planted", GIT_ATTRIBUTES, b"python's")
        return [item.get_secret() for item in secretstorage.search_items(connection, {"server": "shared.example"})]
    finally:
        connection.close()


def test_apps_the_config_separates_find_their_own_secrets_and_not_each_others(monkeypatch):
    s = confined_setup(monkeypatch)
    try:
        python_sees = store_both(s)
        assert python_sees == [b"python's"]  # not git's credential
        assert s.git_credential("fill", GIT_QUESTION) == GIT_QUESTION + ["username=alice", "password=git's"]
        assert SecretService.Keyring().get_password("pypi", "alice") == "python's"
        # Python's item holds what git searches for, yet git is answered with its own only.
        s.git_credential("reject", GIT_QUESTION)
        assert s.git_credential("fill", GIT_QUESTION) == GIT_QUESTION + ["username=asked", "password=asked"]
        # git's reject (libsecret clears every item it finds) left Python's alone.
        connection = secretstorage.dbus_init()
        try:
            assert [i.get_label() for i in secretstorage.search_items(connection, {"server": "shared.example"})] == ["planted"]
        finally:
            connection.close()
        assert SecretService.Keyring().get_password("pypi", "alice") == "python's"
    finally:
        s.stop()


def test_with_the_default_config_both_apps_share_the_users_secrets(secret_service):
    python_sees = store_both(secret_service)
    assert sorted(python_sees) == [b"git's", b"python's"]
