"""Items that ask first, from Python (issue 29): access_control=/require= on add, auth_ui= and
reason= on reads, and the person's answers as the client's exception types, against the real
keychaind with a scripted pinentry (Tests/SecretServiceScripts/fake_pinentry.py)."""

import os

import pytest

from keychaind_client import (AccessControl, AuthFailed, Connection, InteractionNotAllowed, KeychainError, Status,
                              UserCanceled)

FAKE_PINENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "Tests",
                             "SecretServiceScripts", "fake_pinentry.py")
PASSCODE = "1234"


class Prompt:
    """keychaind with a [prompt] whose pinentry takes, at each prompt, the next line of its
    answers (comma-separated tries, or "cancel"), and logs what it was told."""

    def __init__(self, start_daemon, answers):
        import tempfile
        self.root = tempfile.mkdtemp(prefix="kcpp.", dir="/tmp")
        self.log = os.path.join(self.root, "pinentry.log")
        queue = os.path.join(self.root, "answers")
        with open(queue, "w") as f:
            f.write("".join(a + "\n" for a in answers))
        program = os.path.join(self.root, "pinentry")
        with open(program, "w") as f:
            # keychaind starts pinentry with PATH and LANG alone: the paths are written in.
            f.write("#!/bin/sh\nanswer=$(head -n 1 '%s'); sed -i 1d '%s'\n"
                    "FAKE_PINENTRY_ANSWERS=\"${answer:-cancel}\" FAKE_PINENTRY_LOG='%s' exec '%s'\n"
                    % (queue, queue, self.log, os.path.realpath(FAKE_PINENTRY)))
        os.chmod(program, 0o700)
        self.daemon = start_daemon('[prompt]\npinentry = "%s"\ndisplay = ":99"\n' % program)
        self.conn = Connection(self.daemon.socket)
        self.conn.set_passcode(PASSCODE)

    def said(self):
        try:
            with open(self.log) as f:
                return f.read()
        except FileNotFoundError:
            return ""


def token(**extra):
    base = {"class": "genp", "svce": "prod", "acct": "deploy", "labl": "prod token", "v_Data": b"s3cret"}
    base.update(extra)
    return base


SECRET = {"class": "genp", "svce": "prod", "acct": "deploy", "r_Data": True}


def test_require_presence_stores_the_constraint_and_the_attributes_say_it_asks_first(start_daemon):
    p = Prompt(start_daemon, [])
    p.conn.add(token(), require="presence")
    attributes = p.conn.copy_matching({"class": "genp", "svce": "prod", "r_Attributes": True})
    assert attributes["accc"] == "ak;1"
    control = AccessControl.from_attributes(attributes)
    assert control == AccessControl("when-unlocked", AccessControl.USER_PRESENCE) and control.asks_first
    assert "GETPIN" not in p.said()


def test_reading_asks_naming_this_process_and_the_passcode_returns_the_secret(start_daemon):
    p = Prompt(start_daemon, [PASSCODE])
    p.conn.add(token(), access_control=AccessControl("after-first-unlock", AccessControl.DEVICE_PASSCODE))
    assert p.conn.get_password("prod", "deploy", reason="rotate the key") == b"s3cret"
    said = p.said()
    executable = os.path.realpath("/proc/self/exe")
    assert "SETDESC %s (pid %d) wants to use the keychain item \u201cprod token\u201d.%%0AIts reason: rotate the key"\
        % (executable, os.getpid()) in said, said
    assert PASSCODE not in said


def test_the_person_saying_no_is_user_canceled(start_daemon):
    p = Prompt(start_daemon, ["cancel"])
    p.conn.add(token(), require="presence")
    with pytest.raises(UserCanceled) as e:
        p.conn.copy_matching(SECRET)
    assert e.value.status == Status.USER_CANCELED == -128
    assert isinstance(e.value, KeychainError)


def test_three_wrong_passcodes_are_auth_failed(start_daemon):
    p = Prompt(start_daemon, ["a,b,c"])
    p.conn.add(token(), require="presence")
    with pytest.raises(AuthFailed) as e:
        p.conn.copy_matching(SECRET)
    assert e.value.status == Status.AUTH_FAILED


def test_auth_ui_fail_is_interaction_not_allowed_without_asking(start_daemon):
    p = Prompt(start_daemon, [PASSCODE])
    p.conn.add(token(), require="presence")
    with pytest.raises(InteractionNotAllowed) as e:
        p.conn.get_password("prod", "deploy", auth_ui="fail")
    assert e.value.status == Status.INTERACTION_NOT_ALLOWED
    assert "GETPIN" not in p.said()


def test_auth_ui_skip_leaves_the_item_out_without_asking(start_daemon):
    p = Prompt(start_daemon, [PASSCODE])
    p.conn.add(token(), require="presence")
    p.conn.add({"class": "genp", "svce": "prod", "acct": "plain", "v_Data": b"x"})
    found = p.conn.copy_matching({"class": "genp", "svce": "prod", "r_Data": True, "m_Limit": "m_LimitAll"}, auth_ui="skip")
    assert found == [b"x"]
    assert "GETPIN" not in p.said()


def test_nobody_to_ask_is_interaction_not_allowed(start_daemon):
    d = start_daemon()
    c = Connection(d.socket)
    c.set_passcode(PASSCODE)
    c.add(token(), require="passcode")
    with pytest.raises(InteractionNotAllowed):
        c.copy_matching(SECRET)
    c.close()


def test_combinations_apple_refuses_are_refused_before_sending():
    nowhere = Connection("/nonexistent/keychaind.sock")
    with pytest.raises(KeychainError) as e:
        nowhere.add(token(), require=["presence", "passcode"])
    assert e.value.status == Status.PARAM
    with pytest.raises(KeychainError) as e:
        nowhere.add(token(), access_control="ak;2")
    assert e.value.status == Status.NOT_AVAILABLE
    with pytest.raises(KeychainError) as e:
        nowhere.add(token(), require="presence", synchronizable=True)
    assert e.value.status == Status.PARAM
    with pytest.raises(ValueError):
        nowhere.add(token(), require="fingerprint")
