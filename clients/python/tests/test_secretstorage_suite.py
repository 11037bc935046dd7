"""SecretStorage 3.5.0's own test suite (its sdist's tests/, which scripts/test-python fetches
from PyPI into .venv) run unchanged against the real bridge over a real keychaind, on a private
session bus. gnome-keyring 42.1 passes 21 of its 27 tests and skips 6 (those that need the
suite's mock service); the bridge must do the same."""
import os
import re
import subprocess
import sys

from test_secret_service import REPO, SecretServiceSetup

SUITE = os.environ.get("SECRETSTORAGE_SUITE", os.path.join(REPO, ".venv", "secretstorage-3.5.0"))


def test_secretstorage_3_5_0_suite_passes_as_on_gnome_keyring():
    runner = os.path.join(SUITE, "tests", "run_tests.py")
    assert os.path.isfile(runner), "no SecretStorage 3.5.0 sdist at %s: scripts/test-python fetches it" % SUITE
    setup = SecretServiceSetup()
    try:
        result = subprocess.run([sys.executable, runner], cwd=SUITE, env=setup.env, capture_output=True, text=True,
                                timeout=300)
    finally:
        setup.stop()
    report = result.stderr
    ran = int(re.search(r"^Ran (\d+) tests?", report, re.M).group(1))
    skipped = int((re.search(r"skipped=(\d+)", report) or [0, 0])[1])
    failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", report))
    assert (ran - skipped - failed, failed, skipped) == (21, 0, 6), report
