import datetime
import os
import re
import shutil
import subprocess
import sys
import threading

import pytest

from keychaind_client import AbsoluteTime, Connection, KeychainError, Status


def item(**extra):
    base = {"class": "genp", "svce": "api.example.com", "acct": "alice"}
    base.update(extra)
    return base


def test_add_then_copy_matching_returns_the_exact_secret(conn):
    conn.add(item(v_Data=b"tok\x00\xff"))
    assert conn.copy_matching(item(r_Data=True)) == b"tok\x00\xff"


def test_attributes_come_back_with_their_types(conn):
    conn.add(item(v_Data=b"x", labl="Label", pdmn="ck"))
    attrs = conn.copy_matching(item(r_Attributes=True))
    assert attrs["acct"] == "alice" and attrs["labl"] == "Label" and attrs["pdmn"] == "ck"
    assert attrs["sync"] == 0
    assert isinstance(attrs["cdat"], AbsoluteTime)
    assert attrs["cdat"].to_datetime().year >= 2025


def test_match_limit_all_returns_a_list(conn):
    for name in ("a", "b", "c"):
        conn.add({"class": "genp", "svce": "s", "acct": name, "v_Data": name.encode()})
    found = conn.copy_matching({"class": "genp", "svce": "s", "r_Data": True, "m_Limit": "m_LimitAll"})
    assert sorted(found) == [b"a", b"b", b"c"]


def test_update_and_delete(conn):
    conn.add(item(v_Data=b"one"))
    conn.update(item(), {"v_Data": b"two"})
    assert conn.copy_matching(item(r_Data=True)) == b"two"
    conn.delete(item())
    with pytest.raises(KeychainError) as e:
        conn.copy_matching(item())
    assert e.value.status == Status.ITEM_NOT_FOUND


def test_errors_carry_the_status_and_message(conn):
    conn.add(item())
    with pytest.raises(KeychainError) as e:
        conn.add(item())
    assert e.value.status == Status.DUPLICATE_ITEM
    with pytest.raises(KeychainError) as e:
        conn.add({"class": "genp", "srvr": "x"})
    assert e.value.status == Status.NO_SUCH_ATTR and "srvr" in e.value.message
    with pytest.raises(TypeError):
        conn.add({"class": "genp", "v_Data": 1.5})


def test_status_lock_and_unlock(conn):
    assert conn.status()["state"] == "unlocked"
    conn.add(item(v_Data=b"x"))
    conn.set_passcode("1234")
    conn.lock()
    assert conn.status()["state"] == "locked"
    with pytest.raises(KeychainError) as e:
        conn.copy_matching(item(r_Data=True))
    assert e.value.status == Status.INTERACTION_NOT_ALLOWED
    with pytest.raises(KeychainError) as e:
        conn.unlock("wrong")
    assert e.value.status == Status.AUTH_FAILED
    conn.unlock("1234")
    assert conn.copy_matching(item(r_Data=True)) == b"x"


def test_the_common_case_helpers(conn):
    assert conn.get_password("svc", "me") is None
    conn.set_password("svc", "me", "first")
    conn.set_password("svc", "me", "second")
    assert conn.get_password("svc", "me") == b"second"
    conn.delete_password("svc", "me")
    assert conn.get_password("svc", "me") is None


def test_reconnects_after_a_daemon_restart(daemon, conn):
    conn.set_password("svc", "me", "kept")
    daemon.restart()
    assert conn.get_password("svc", "me") == b"kept"
    conn.set_password("svc", "me2", "after")
    assert conn.get_password("svc", "me2") == b"after"


def test_one_connection_is_safe_across_threads(conn):
    errors = []

    def work(i):
        try:
            conn.set_password("threads", "k%d" % i, "v%d" % i)
            assert conn.get_password("threads", "k%d" % i) == ("v%d" % i).encode()
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_an_unreachable_daemon_is_service_not_available():
    with pytest.raises(KeychainError) as e:
        Connection("/tmp/no-such-keychaind.sock").status()
    assert e.value.status == Status.SERVICE_NOT_AVAILABLE


def test_a_list_longer_than_one_frame_arrives_whole_in_pages(conn):
    label = "L" * 1000
    for i in range(1500):  # about 1.6 MB of attributes: more than one frame
        conn.add({"class": "genp", "svce": "long", "acct": "a%d" % i, "labl": label, "v_Data": b"x"})
    items = conn.copy_matching({"class": "genp", "svce": "long", "m_Limit": "m_LimitAll", "r_Attributes": True})
    assert sorted(a["acct"] for a in items) == sorted("a%d" % i for i in range(1500))


def test_several_large_secrets_arrive_in_one_answer(conn):
    secrets = [bytes([i + 1]) * (1 << 20) for i in range(3)]
    for i, s in enumerate(secrets):
        conn.add({"class": "genp", "svce": "big", "acct": "b%d" % i, "v_Data": s})
    got = conn.copy_matching({"class": "genp", "svce": "big", "m_Limit": "m_LimitAll", "r_Data": True})
    assert sorted(got) == sorted(secrets)


def test_status_lists_every_code_the_daemon_sends():
    swift = os.path.join(os.path.dirname(__file__), "..", "..", "..", "Sources", "KeychainModel", "KeychainError.swift")
    with open(swift) as f:
        daemon_codes = {int(v) for v in re.findall(r"^\s*case \S+ = (-?\d+)\s*$", f.read(), re.M)}
    assert len(daemon_codes) > 10
    client_codes = {v for k, v in vars(Status).items() if k.isupper()}
    assert daemon_codes - client_codes == set()


def test_set_password_takes_accessibility_by_name(conn):
    conn.set_password("svc", "me", "x", accessible="after-first-unlock")
    assert conn.copy_matching({"class": "genp", "svce": "svc", "r_Attributes": True})["pdmn"] == "ck"
    with pytest.raises(ValueError) as e:
        conn.set_password("svc", "me", "x", accessible="sometimes")
    assert "when-unlocked" in str(e.value)


def test_set_password_passes_an_expiry_the_daemon_keeps(conn):
    conn.set_password("svc", "me", "x", expires=datetime.timedelta(hours=1))
    expd = conn.copy_matching({"class": "genp", "svce": "svc", "r_Attributes": True})["expd"]
    left = expd.to_datetime() - datetime.datetime.now(datetime.timezone.utc)
    assert datetime.timedelta(minutes=59) < left <= datetime.timedelta(hours=1)


def test_an_expired_password_is_not_returned(conn):
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    conn.set_password("svc", "gone", "x", expires=past)
    assert conn.get_password("svc", "gone") is None
    # It takes no room: setting it again adds it anew.
    conn.set_password("svc", "gone", "y")
    assert conn.get_password("svc", "gone") == b"y"


def test_a_naive_expiry_is_refused(conn):
    with pytest.raises(ValueError):
        conn.set_password("svc", "me", "x", expires=datetime.datetime(2099, 1, 1))


def test_the_package_ships_py_typed(tmp_path):
    # setuptools' build step for the package, on a copy (it writes next to the sources): what
    # it puts in the build directory is what a wheel or an install holds.
    pytest.importorskip("setuptools")
    here = os.path.join(os.path.dirname(__file__), "..")
    project = tmp_path / "project"
    shutil.copytree(here, str(project), ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "tests"))
    subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "--quiet", "build_py",
                    "--build-lib", str(tmp_path / "lib")], cwd=str(project), check=True, capture_output=True, timeout=300)
    assert (tmp_path / "lib" / "keychaind_client" / "py.typed").is_file()
