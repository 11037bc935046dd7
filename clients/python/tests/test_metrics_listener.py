"""[metrics] listen (issue 27): a scraper reads the exposition over HTTP, fetched by curl from
the Unix socket and from a loopback port, parsed by Prometheus's own parser."""
import os
import re
import shutil
import socket
import subprocess
import tempfile

import pytest
from prometheus_client.parser import text_string_to_metric_families

SERVICE = "svc-scrape-3e9d01"
ACCOUNT = "acct-scrape-7b22c4"
# What a careless exporter might put in a label: a token-shaped label and secret.
LABEL = "ghp_Label0f4a9c2e7d1b5f3a8c6e0d2b4f6a8c0e1d3"
SECRET = "ghp_S3cr3t9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3"
CURL = shutil.which("curl") or "/usr/bin/curl"


@pytest.fixture
def socket_dir():
    d = tempfile.mkdtemp(prefix="kcm.", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def curl(*args):
    done = subprocess.run([CURL, "-sS", "--fail", "--max-time", "60", *args], capture_output=True, check=True)
    return done.stdout.decode()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def store_and_read(daemon):
    from keychaind_client import Connection
    c = Connection(daemon.socket)
    try:
        c.add({"class": "genp", "svce": SERVICE, "acct": ACCOUNT, "labl": LABEL, "v_Data": SECRET.encode()})
        assert c.get_password(SERVICE, ACCOUNT) == SECRET.encode()
        assert c.get_password(SERVICE, "nobody") is None
    finally:
        c.close()


def test_a_scraper_parses_the_exposition_from_the_unix_socket(start_daemon, socket_dir):
    path = os.path.join(socket_dir, "metrics.sock")
    daemon = start_daemon('[metrics]\nlisten = "unix:%s"\n' % path)
    store_and_read(daemon)
    found = families(curl("--unix-socket", path, "http://localhost/metrics"))
    operations = {(s.labels["operation"], s.labels["status"]): s.value
                  for s in found["keychaind_operations"].samples if s.name == "keychaind_operations_total"}
    assert operations[("add", "errSecSuccess")] == 1
    assert operations[("copyMatching", "errSecItemNotFound")] == 1
    assert found["keychaind_operation_duration_seconds"].type == "histogram"
    assert found["keychaind_locked"].samples[0].value == 0


def test_a_scraper_parses_the_exposition_from_a_loopback_port(start_daemon):
    port = free_port()
    daemon = start_daemon('[metrics]\nlisten = "tcp:127.0.0.1:%d"\nallow_tcp = true\n' % port)
    store_and_read(daemon)
    found = families(curl("http://127.0.0.1:%d/metrics" % port))
    assert found["keychaind_connections"].samples[0].value >= 1
    assert "keychaind_sync_lag_seconds" in found


def test_no_label_carries_an_attribute_value_or_a_secret(start_daemon, socket_dir):
    path = os.path.join(socket_dir, "metrics.sock")
    daemon = start_daemon('[metrics]\nlisten = "unix:%s"\n' % path)
    store_and_read(daemon)
    text = curl("--unix-socket", path, "http://localhost/metrics")
    for needle in (SERVICE, ACCOUNT, LABEL, SECRET, "ghp_", "scrape-"):
        assert needle not in text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for name, value in sample.labels.items():
                assert name in ("operation", "status", "via", "reason", "le"), name
                assert re.fullmatch(r"[A-Za-z_]+|[0-9.e+-]+|\+Inf", value), value
