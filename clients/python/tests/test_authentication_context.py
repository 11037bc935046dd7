"""AuthenticationContext, the Python client's LAContext (issue 29; docs/protocol.md, operations
49 to 52): made on a connection, authenticated once, reused by reads and key uses, holding an
application password, invalidated by hand or by leaving a with block; against the real
keychaind with a scripted pinentry (test_access_control.Prompt)."""

import pytest

from keychaind_client import (AuthenticationContext, AuthFailed, Connection, InteractionNotAllowed, Key,
                              KeychainError, Status, UserCanceled)

from test_access_control import PASSCODE, SECRET, Prompt, token

APP_PASSWORD = "correct horse"


def prompts(p):
    return p.said().count("GETPIN")


def asking_item_and_context(start_daemon, answers):
    """A daemon whose prompt gives `answers`, its token that asks first, and a new context."""
    p = Prompt(start_daemon, answers)
    p.conn.add(token(), require="presence")
    return p, AuthenticationContext(p.conn)


def test_one_prompt_serves_every_read_that_carries_the_context(start_daemon):
    p, context = asking_item_and_context(start_daemon, [PASSCODE])
    assert p.conn.copy_matching(SECRET, context=context) == b"s3cret"
    assert p.conn.get_password("prod", "deploy", context=context) == b"s3cret"
    assert prompts(p) == 1


def test_authenticate_asks_now_with_the_reason_and_spares_the_reads(start_daemon):
    p, context = asking_item_and_context(start_daemon, [PASSCODE])
    context.authenticate("ship the release")
    assert "Its reason: ship the release" in p.said()
    assert p.conn.copy_matching(SECRET, context=context, auth_ui="fail") == b"s3cret"
    assert prompts(p) == 1


def test_evaluate_is_authenticate(start_daemon):
    p, context = asking_item_and_context(start_daemon, [PASSCODE])
    context.evaluate("deploy")
    assert p.conn.get_password("prod", "deploy", context=context, auth_ui="fail") == b"s3cret"


def test_cancelling_authenticate_is_user_canceled_and_the_context_stays_unauthenticated(start_daemon):
    p, context = asking_item_and_context(start_daemon, ["cancel"])
    with pytest.raises(UserCanceled):
        context.authenticate("deploy")
    with pytest.raises(InteractionNotAllowed):
        p.conn.copy_matching(SECRET, context=context, auth_ui="fail")


def test_an_invalidated_context_opens_nothing_and_is_not_sent(start_daemon):
    p, context = asking_item_and_context(start_daemon, [PASSCODE])
    context.authenticate("deploy")
    reference = context.reference
    context.invalidate()
    context.invalidate()  # a second time does nothing
    assert not context.valid
    with pytest.raises(ValueError):
        p.conn.copy_matching(SECRET, context=context)
    with pytest.raises(KeychainError) as raised:
        p.conn.copy_matching(dict(SECRET, u_CredRef=reference), auth_ui="fail")
    assert raised.value.status == Status.PARAM


def test_leaving_the_with_block_invalidates_it(start_daemon):
    p = Prompt(start_daemon, [])
    with AuthenticationContext(p.conn) as context:
        assert p.conn.status()["contexts"] == 1
    assert not context.valid
    assert "contexts" not in p.conn.status()


def test_another_connections_context_is_refused_before_anything_is_sent(start_daemon):
    p = Prompt(start_daemon, [PASSCODE])
    p.conn.add(token(), require="presence")
    other = Connection(p.daemon.socket)
    try:
        context = AuthenticationContext(other)
        with pytest.raises(ValueError):
            p.conn.copy_matching(SECRET, context=context)
        assert prompts(p) == 0
    finally:
        other.close()


def test_a_context_and_app_password_together_are_refused(start_daemon):
    p = Prompt(start_daemon, [])
    context = AuthenticationContext(p.conn)
    with pytest.raises(ValueError):
        p.conn.copy_matching(SECRET, context=context, app_password=APP_PASSWORD)


def test_the_application_password_set_on_the_context_adds_and_reads_a_sealed_item(conn):
    with AuthenticationContext(conn) as context:
        context.set_application_password(APP_PASSWORD)
        conn.add({"class": "genp", "svce": "vault", "acct": "api", "v_Data": b"tok"}, require="app-password",
                 context=context)
        assert conn.get_password("vault", "api", context=context) == b"tok"
    with pytest.raises(InteractionNotAllowed):
        conn.get_password("vault", "api")
    assert conn.get_password("vault", "api", app_password=APP_PASSWORD) == b"tok"


def test_a_wrong_application_password_on_the_context_is_auth_failed(conn):
    conn.add({"class": "genp", "svce": "vault", "acct": "api", "v_Data": b"tok"}, require="app-password",
             app_password=APP_PASSWORD)
    with AuthenticationContext(conn) as context:
        context.set_application_password(b"battery staple")
        with pytest.raises(AuthFailed) as raised:
            conn.get_password("vault", "api", context=context)
        assert "battery" not in str(raised.value)


def test_an_emptied_application_password_reads_nothing(conn):
    conn.add({"class": "genp", "svce": "vault", "acct": "api", "v_Data": b"tok"}, require="app-password",
             app_password=APP_PASSWORD)
    with AuthenticationContext(conn) as context:
        context.set_application_password(APP_PASSWORD)
        context.set_application_password(b"")
        with pytest.raises(InteractionNotAllowed):
            conn.get_password("vault", "api", context=context)


def test_a_key_sealed_under_the_contexts_password_signs_with_that_context(conn):
    with AuthenticationContext(conn) as context:
        context.set_application_password(APP_PASSWORD)
        key = Key.generate(conn, "ed25519", "sealed", require="app-password", context=context)
        signature = key.sign(b"message", context=context)
        assert key.verify(signature, b"message")
    with pytest.raises(InteractionNotAllowed):
        key.sign(b"message")


def test_a_key_that_asks_first_asks_once_for_signatures_under_one_context(start_daemon):
    p = Prompt(start_daemon, [PASSCODE])
    key = Key.generate(p.conn, "ed25519", "asks", require="presence")
    with AuthenticationContext(p.conn) as context:
        for _ in range(3):
            key.sign(b"m", context=context)
    assert prompts(p) == 1
