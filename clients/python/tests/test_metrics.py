"""Op 45, the daemon's metrics (issue 27), read by Prometheus's own parser."""
import re

from prometheus_client.parser import text_string_to_metric_families

SERVICE = "svc-metrics-7f3a9c"
ACCOUNT = "acct-metrics-51d0e2"
LABEL = "label-metrics-c4b8aa"
SECRET = "secret-metrics-90aa17"


def families(conn):
    return {f.name: f for f in text_string_to_metric_families(conn.metrics())}


def test_the_exposition_parses_and_counts_calls_by_operation_and_status(conn):
    conn.add({"class": "genp", "svce": SERVICE, "acct": ACCOUNT, "labl": LABEL, "v_Data": SECRET.encode()})
    assert conn.get_password(SERVICE, ACCOUNT) == SECRET.encode()
    assert conn.get_password(SERVICE, "nobody") is None
    found = families(conn)
    operations = {(s.labels["operation"], s.labels["status"]): s.value
                  for s in found["keychaind_operations"].samples if s.name == "keychaind_operations_total"}
    assert operations[("add", "errSecSuccess")] == 1
    assert operations[("copyMatching", "errSecSuccess")] == 1
    assert operations[("copyMatching", "errSecItemNotFound")] == 1
    durations = found["keychaind_operation_duration_seconds"]
    assert durations.type == "histogram"
    counts = [s for s in durations.samples if s.name.endswith("_count") and s.labels["operation"] == "copyMatching"]
    assert counts and counts[0].value == 2
    assert found["keychaind_locked"].samples[0].value == 0
    assert found["keychaind_connections"].samples[0].value >= 1
    assert "keychaind_sync_backlog_changes" in found and "keychaind_sync_lag_seconds" in found


def test_no_attribute_value_or_secret_appears_anywhere_in_the_output(conn):
    conn.add({"class": "genp", "svce": SERVICE, "acct": ACCOUNT, "labl": LABEL, "v_Data": SECRET.encode()})
    conn.get_password(SERVICE, ACCOUNT)
    conn.get_password(SERVICE + "-missing", ACCOUNT + "-missing")
    text = conn.metrics()
    for needle in (SERVICE, ACCOUNT, LABEL, SECRET, "svc-metrics", "acct-metrics"):
        assert needle not in text
    # Every label value is from a fixed set: names of operations and statuses, or a few words.
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for name, value in sample.labels.items():
                assert name in ("operation", "status", "via", "reason", "le"), name
                assert re.fullmatch(r"[A-Za-z_]+|[0-9.e+-]+|\+Inf", value), value


def test_a_locked_keychain_shows_in_the_lock_gauge(conn):
    conn.set_passcode("1234")
    conn.lock()
    assert families(conn)["keychaind_locked"].samples[0].value == 1
