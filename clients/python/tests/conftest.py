import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from keychaind_client import Connection

HERE = os.path.dirname(os.path.abspath(__file__))
KEYCHAIND = os.environ.get("KEYCHAIND_BIN", os.path.join(HERE, "..", "..", "..", ".build", "debug", "keychaind"))


class Daemon:
    """A real keychaind on a temporary state directory and socket."""

    def __init__(self, config=""):
        self.config = config  # TOML appended to the test's keychaind.toml
        self.root = tempfile.mkdtemp(prefix="kcpy.", dir="/tmp")  # socket paths are short
        self.socket = os.path.join(self.root, "s.sock")
        self.log = open(os.path.join(self.root, "daemon.log"), "wb")
        self.process = None
        self.start()

    def start(self):
        env = dict(os.environ, KEYCHAIND_INSECURE_FAST_KDF="1")
        config = os.path.join(self.root, "keychaind.toml")
        with open(config, "w") as f:
            f.write("lock_grace_seconds = 0\n" + self.config)
        self.process = subprocess.Popen(
            [KEYCHAIND, "--state-dir", os.path.join(self.root, "state"), "--socket", self.socket, "--config", config],
            stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                c = Connection(self.socket)
                try:
                    c.status()
                finally:
                    c.close()
                return
            except Exception:
                if self.process.poll() is not None:
                    raise RuntimeError("keychaind exited with %s" % self.process.returncode)
                time.sleep(0.02)
        raise RuntimeError("keychaind did not start")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=20)

    def restart(self):
        self.stop()
        self.start()


def _remove(d):
    d.stop()
    d.log.close()
    shutil.rmtree(d.root, ignore_errors=True)


@pytest.fixture
def daemon():
    d = Daemon()
    yield d
    _remove(d)


@pytest.fixture
def start_daemon():
    """start_daemon(config) starts another daemon with that TOML; each is removed after the test."""
    started = []

    def start(config=""):
        d = Daemon(config)
        started.append(d)
        return d

    yield start
    for d in started:
        _remove(d)


@pytest.fixture
def conn(daemon):
    c = Connection(daemon.socket)
    yield c
    c.close()
