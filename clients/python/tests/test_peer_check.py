"""The client talks only to a keychaind it trusts: one served by root, by the caller, or by a uid
the caller names (trust_uid= or KEYCHAIN_TRUST_UID); and it uses the default /tmp/keychaind-UID
directory only when that directory is private to the caller.

These tests need root (as CI runs them): a stand-in server runs as the user `kcimpostor` and the
client as the user `kcclient` (root and the caller are always trusted, so neither side can be
root here). Both users are created as system users when missing.
"""

import json
import os
import pwd
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import traceback

import pytest

from keychaind_client import Connection, KeychainError, Status

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="runs servers and clients as other users: needs root")

SECRET = "s3cret-that-must-not-leak"
CLEARED_ENV = ("KEYCHAIN_SOCKET", "XDG_RUNTIME_DIR", "KEYCHAIN_TRUST_UID")


def _user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True)
        return pwd.getpwnam(name)


def _become(pw):
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


def _read_until_eof(fd, seconds):
    data = b""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError("a test child did not answer within %s s" % seconds)
        chunk = os.read(fd, 65536)
        if not chunk:
            return data
        data += chunk


def _answer_every_frame_with_success(conn, record_fd):
    answer = b"\x01" + struct.pack("<iI", 0, 0) + b"\x00"  # version 1, status 0, no message, no result
    pending = b""
    while True:
        data = conn.recv(65536)
        if not data:
            return
        os.write(record_fd, data)
        pending += data
        while len(pending) >= 4:
            (n,) = struct.unpack("<I", pending[:4])
            if len(pending) < 4 + n:
                break
            pending = pending[4 + n:]
            conn.sendall(struct.pack("<I", len(answer)) + answer)


class FakeServer:
    """A stand-in keychaind listening at `path` as user `pw`: answers every frame with success and
    records every byte it receives and every connection it accepts (in root-owned files)."""

    def __init__(self, pw, path, record_dir):
        self.path = path
        self.uid = pw.pw_uid
        self.bytes_file = tempfile.mktemp(prefix="bytes.", dir=record_dir)
        self.connections_file = tempfile.mktemp(prefix="conns.", dir=record_dir)
        record = os.open(self.bytes_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        conns = os.open(self.connections_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        ready_r, ready_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the server, as pw
            try:
                os.close(ready_r)
                _become(pw)
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(path)
                os.chmod(path, 0o777)
                s.listen(8)
                os.write(ready_w, b"1")
                os.close(ready_w)
                while True:
                    c, _ = s.accept()
                    os.write(conns, b"c")
                    try:
                        _answer_every_frame_with_success(c, record)
                    except OSError:
                        pass
                    c.close()
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(1)
        os.close(ready_w)
        os.close(record)
        os.close(conns)
        try:
            ready = select.select([ready_r], [], [], 10)[0] and os.read(ready_r, 1)
        finally:
            os.close(ready_r)
        if ready != b"1":
            self.stop()
            raise RuntimeError("the fake server as uid %d did not start at %s" % (self.uid, path))

    def received(self):
        with open(self.bytes_file, "rb") as f:
            return f.read()

    def connections(self):
        with open(self.connections_file, "rb") as f:
            return len(f.read())

    def stop(self):
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(self.pid, 0)
            self.pid = None


class Client:
    """Runs fn() in a child as user pw, with KEYCHAIN_SOCKET, XDG_RUNTIME_DIR and KEYCHAIN_TRUST_UID
    cleared and then `env` set; .result() is {"ok": repr(value)}, {"status": s, "message": m} for a
    KeychainError, or {"error": repr(exception)}."""

    def __init__(self, pw, fn, env=None):
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(r)
                _become(pw)
                for name in CLEARED_ENV:
                    os.environ.pop(name, None)
                os.environ.update(env or {})
                try:
                    out = {"ok": repr(fn())}
                except KeychainError as e:
                    out = {"status": e.status, "message": e.message}
                except BaseException as e:
                    out = {"error": "%s: %s" % (type(e).__name__, e)}
                os.write(w, json.dumps(out).encode())
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(w)
        self.fd = r

    def result(self, seconds=30):
        try:
            data = _read_until_eof(self.fd, seconds)
        finally:
            os.close(self.fd)
            os.waitpid(self.pid, 0)
        if not data:
            raise RuntimeError("the client child failed before reporting (see captured stderr)")
        return json.loads(data)


def run_client(pw, fn, env=None):
    return Client(pw, fn, env).result()


def set_a_secret(path=None, **kwargs):
    """A client call that carries a secret."""
    def fn():
        return Connection(path, timeout=10, **kwargs).set_password("svc", "me", SECRET)
    return fn


@pytest.fixture
def impostor():
    return _user("kcimpostor")


@pytest.fixture
def client():
    return _user("kcclient")


@pytest.fixture
def sandbox():
    """A short, world-writable directory for sockets and root-only records."""
    d = tempfile.mkdtemp(prefix="kcpeer.", dir="/tmp")
    os.chmod(d, 0o1777)
    servers = []

    class Sandbox:
        root = d
        socket = os.path.join(d, "s.sock")

        @staticmethod
        def serve(pw, path=None):
            server = FakeServer(pw, path or Sandbox.socket, d)
            servers.append(server)
            return server

    yield Sandbox
    for server in servers:
        server.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def default_dir(client):
    """/tmp/keychaind-UID of the client user, absent before and removed after the test."""
    path = "/tmp/keychaind-%d" % client.pw_uid

    def remove():
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)

    remove()
    yield path
    remove()


def refused_message(result):
    assert "status" in result, result
    assert result["status"] == Status.SERVICE_NOT_AVAILABLE, result
    return result["message"]


# -- the server's uid --

def test_a_socket_served_by_another_uid_is_refused_before_anything_is_sent(sandbox, impostor, client):
    server = sandbox.serve(impostor)
    message = refused_message(run_client(client, set_a_secret(sandbox.socket)))
    assert message == (
        "refusing to talk to keychaind at %s: it is served by uid %d (kcimpostor), not by root or by "
        "you (uid %d); if you trust that daemon, set KEYCHAIN_TRUST_UID=%d or pass trust_uid=%d"
        % (sandbox.socket, impostor.pw_uid, client.pw_uid, impostor.pw_uid, impostor.pw_uid))
    assert server.received() == b""


@pytest.mark.parametrize("form", ["uid", "name"])
def test_trust_uid_argument_trusts_a_server_of_that_uid(sandbox, impostor, client, form):
    server = sandbox.serve(impostor)
    trust = impostor.pw_uid if form == "uid" else impostor.pw_name
    result = run_client(client, set_a_secret(sandbox.socket, trust_uid=trust))
    assert result == {"ok": "None"}
    assert SECRET.encode() in server.received()


@pytest.mark.parametrize("form", ["uid", "name"])
def test_keychain_trust_uid_makes_a_refused_server_trusted(sandbox, impostor, client, form):
    server = sandbox.serve(impostor)
    refused = run_client(client, set_a_secret(sandbox.socket))
    assert refused.get("status") == Status.SERVICE_NOT_AVAILABLE, refused
    assert server.received() == b""
    trust = str(impostor.pw_uid) if form == "uid" else impostor.pw_name
    result = run_client(client, set_a_secret(sandbox.socket), env={"KEYCHAIN_TRUST_UID": trust})
    assert result == {"ok": "None"}
    assert SECRET.encode() in server.received()


def test_keychain_trust_uid_naming_another_uid_does_not_trust_this_one(sandbox, impostor, client):
    server = sandbox.serve(impostor)
    other = str(impostor.pw_uid + 1 if impostor.pw_uid + 1 != client.pw_uid else impostor.pw_uid + 2)
    result = run_client(client, set_a_secret(sandbox.socket), env={"KEYCHAIN_TRUST_UID": other})
    assert "served by uid %d" % impostor.pw_uid in refused_message(result)
    assert server.received() == b""


def test_a_reconnect_is_checked_like_the_first_connection(sandbox, impostor, client):
    # The client's first daemon is its own (trusted); it goes away and an impostor takes the path.
    own = sandbox.serve(client)
    first_done_r, first_done_w = os.pipe()
    swapped_r, swapped_w = os.pipe()

    def fn():
        os.close(first_done_r)
        os.close(swapped_w)
        c = Connection(sandbox.socket, timeout=10)
        c.status()
        os.write(first_done_w, b"1")
        _wait_byte(swapped_r)
        c.set_password("svc", "me", SECRET)  # reconnects: the kept connection died with its daemon

    child = Client(client, fn)
    os.close(first_done_w)
    os.close(swapped_r)
    try:
        _wait_byte(first_done_r)
        own.stop()
        os.unlink(sandbox.socket)
        server = sandbox.serve(impostor)
        os.write(swapped_w, b"1")
    finally:
        os.close(first_done_r)
        os.close(swapped_w)
    result = child.result()
    assert own.received() != b""
    assert "served by uid %d (kcimpostor)" % impostor.pw_uid in refused_message(result)
    assert server.received() == b""


def _wait_byte(fd, seconds=20):
    if not select.select([fd], [], [], seconds)[0] or os.read(fd, 1) != b"1":
        raise RuntimeError("the other side of the test did not get there")


# -- the default /tmp/keychaind-UID directory --

def test_a_default_directory_owned_by_another_user_is_not_used(sandbox, impostor, client, default_dir):
    os.mkdir(default_dir, 0o700)
    os.chown(default_dir, impostor.pw_uid, impostor.pw_gid)
    os.chmod(default_dir, 0o755)
    server = sandbox.serve(impostor, os.path.join(default_dir, "keychaind.sock"))
    message = refused_message(run_client(client, set_a_secret()))
    assert "%s is not a private directory owned by you (uid %d)" % (default_dir, client.pw_uid) in message
    assert "KEYCHAIN_SOCKET" in message
    assert server.connections() == 0


def test_a_default_directory_open_to_group_or_others_is_not_used(sandbox, client, default_dir):
    os.mkdir(default_dir, 0o700)
    os.chown(default_dir, client.pw_uid, client.pw_gid)
    os.chmod(default_dir, 0o755)
    server = sandbox.serve(client, os.path.join(default_dir, "keychaind.sock"))
    message = refused_message(run_client(client, set_a_secret()))
    assert "%s is not a private directory owned by you" % default_dir in message
    assert server.connections() == 0


def test_a_default_directory_that_is_a_symlink_is_not_used(sandbox, client, default_dir):
    real = os.path.join(sandbox.root, "real")
    os.mkdir(real, 0o700)
    os.chown(real, client.pw_uid, client.pw_gid)
    os.symlink(real, default_dir)
    server = sandbox.serve(client, os.path.join(real, "keychaind.sock"))
    message = refused_message(run_client(client, set_a_secret()))
    assert "%s is not a private directory owned by you" % default_dir in message
    assert server.connections() == 0


def test_a_private_default_directory_is_used(sandbox, client, default_dir):
    os.mkdir(default_dir, 0o700)
    os.chown(default_dir, client.pw_uid, client.pw_gid)
    server = sandbox.serve(client, os.path.join(default_dir, "keychaind.sock"))
    assert run_client(client, set_a_secret()) == {"ok": "None"}
    assert SECRET.encode() in server.received()


# -- the keyring backend --

def test_the_keyring_backend_passes_trust_uid_to_its_connection(sandbox, impostor, client):
    from keychaind_client.keyring_backend import KeychaindKeyring

    server = sandbox.serve(impostor)

    def fn():
        KeychaindKeyring(sandbox.socket, trust_uid=impostor.pw_name).set_password("svc", "me", SECRET)

    assert run_client(client, fn) == {"ok": "None"}
    assert SECRET.encode() in server.received()
