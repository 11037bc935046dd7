"""The application password from Python (issue 29): require="app-password" on add and
app_password= on reads and updates, through an authentication context (ops 49, 51, 52),
against the real keychaind."""

import pytest

from keychaind_client import AccessControl, AuthFailed, InteractionNotAllowed, KeychainError, Status
import keychaind_client

PASSWORD = "correct horse"
TOKEN = {"class": "genp", "svce": "prod", "acct": "deploy", "v_Data": b"s3cret"}
SECRET = {"class": "genp", "svce": "prod", "acct": "deploy", "r_Data": True}


def test_the_right_password_reads_the_secret(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    assert conn.copy_matching(SECRET, app_password=PASSWORD) == b"s3cret"


def test_get_password_takes_the_password_as_bytes(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD.encode())
    assert conn.get_password("prod", "deploy", app_password=bytearray(PASSWORD.encode())) == b"s3cret"


def test_the_item_carries_the_application_password_flag(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    attributes = conn.copy_matching({"class": "genp", "svce": "prod", "r_Attributes": True})
    assert AccessControl.from_attributes(attributes).flags == AccessControl.APPLICATION_PASSWORD


def test_a_wrong_password_is_auth_failed_and_its_message_never_holds_it(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    with pytest.raises(AuthFailed) as raised:
        conn.copy_matching(SECRET, app_password="battery staple")
    assert raised.value.status == Status.AUTH_FAILED == -25293
    assert "battery" not in str(raised.value) and "battery" not in repr(raised.value.args)


def test_without_the_password_a_read_is_interaction_not_allowed(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    with pytest.raises(InteractionNotAllowed) as raised:
        conn.copy_matching(SECRET)
    assert raised.value.status == Status.INTERACTION_NOT_ALLOWED == -25308


def test_without_the_password_an_add_is_interaction_not_allowed_and_stores_nothing(conn):
    with pytest.raises(InteractionNotAllowed):
        conn.add(TOKEN, require="app-password")
    with pytest.raises(KeychainError) as raised:
        conn.copy_matching({"class": "genp", "svce": "prod", "r_Attributes": True})
    assert raised.value.status == Status.ITEM_NOT_FOUND


def test_an_update_seals_the_new_secret_under_the_given_password(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    conn.update({"class": "genp", "svce": "prod"}, {"v_Data": b"n3w"}, app_password=PASSWORD)
    assert conn.copy_matching(SECRET, app_password=PASSWORD) == b"n3w"


def test_the_context_ends_with_the_call(conn):
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    conn.copy_matching(SECRET, app_password=PASSWORD)
    assert "contexts" not in conn.status()


def test_the_clients_copy_of_the_password_is_zeroed_once_sent(conn, monkeypatch):
    copies = []
    real = keychaind_client._password_buffer

    def kept(password):
        copies.append(real(password))
        return copies[-1]

    monkeypatch.setattr(keychaind_client, "_password_buffer", kept)
    conn.add(TOKEN, require="app-password", app_password=PASSWORD)
    with pytest.raises(AuthFailed):
        conn.copy_matching(SECRET, app_password="wrong one")
    assert copies and all(not any(c) for c in copies)


def test_the_password_is_str_or_bytes(conn):
    with pytest.raises(TypeError):
        conn.copy_matching(SECRET, app_password=1234)


def test_a_key_sealed_under_the_password_signs_with_it_only(conn):
    from keychaind_client import Key
    key = Key.generate(conn, "ed25519", "release", require="app-password", app_password=PASSWORD)
    assert key.attributes["accc"] == "ak;%d" % AccessControl.APPLICATION_PASSWORD
    signature = key.sign(b"v1", app_password=PASSWORD)
    assert key.verify(signature, b"v1")  # the public key's uses need no password
    with pytest.raises(InteractionNotAllowed):
        key.sign(b"v1")
    with pytest.raises(AuthFailed) as raised:
        key.sign(b"v1", app_password="battery staple")
    assert "battery" not in str(raised.value)
