"""The key API against the real daemon. Signatures, shared secrets and ECIES are checked with
pyca/cryptography, an implementation that has nothing to do with keychaind."""

import hashlib

import pytest

from keychaind_client import (AgreementAlgorithm, EncryptionAlgorithm, Key, KeychainError, KeyType,
                              SigningAlgorithm, Status)

crypto = pytest.importorskip("cryptography", reason="scripts/test-python installs cryptography from PyPI")

from cryptography.exceptions import InvalidSignature  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, utils, x25519  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402
from cryptography.hazmat.primitives.kdf.x963kdf import X963KDF  # noqa: E402

MESSAGE = b"meet at the usual place"


def p256_point(public_key):
    return public_key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


def apple_ecies_key(shared, ephemeral_point, derives_iv):
    """Apple's ECIES key schedule (SecKeyAdaptors.m): X9.63 KDF, SHA-256, sharedInfo = the
    ephemeral point; 16 bytes of AES key, then 16 bytes of IV or an all-zero IV."""
    derived = X963KDF(hashes.SHA256(), 32, ephemeral_point).derive(shared)
    return derived[:16], (derived[16:] if derives_iv else bytes(16))


def private_bytes(conn, key):
    return conn.copy_matching({"v_PersistentRef": key.persistent_ref, "r_Data": True})


def test_generate_fills_the_key_and_find_returns_it(conn):
    key = Key.generate(conn, KeyType.P256, "tls")
    assert key.type is KeyType.P256 and key.label == "tls" and not key.extractable
    assert len(key.public_key) == 65 and key.public_key[0] == 4
    assert key.attributes["klbl"] == hashlib.sha1(key.public_key).digest()
    found = Key.find(conn, label="tls")
    assert [k.public_key for k in found] == [key.public_key]
    assert Key.find(conn, label="nothing") == []


def test_an_ed25519_signature_verifies_with_cryptography(conn):
    key = Key.generate(conn, "ed25519", "deploy", application_tag=b"ssh")
    assert key.application_tag == b"ssh"
    signature = key.sign(MESSAGE)
    assert len(signature) == 64
    ed25519.Ed25519PublicKey.from_public_bytes(key.public_key).verify(signature, MESSAGE)
    assert key.verify(signature, MESSAGE)
    assert not key.verify(signature, b"another message")


def test_p256_signatures_verify_with_cryptography(conn):
    key = Key.generate(conn, KeyType.P256, "tls")
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key.public_key)
    public.verify(key.sign(MESSAGE), MESSAGE, ec.ECDSA(hashes.SHA256()))
    digest = hashlib.sha256(MESSAGE).digest()
    over_digest = key.sign(digest, SigningAlgorithm.ECDSA_DIGEST_X962_SHA256)
    public.verify(over_digest, digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))
    with pytest.raises(InvalidSignature):
        public.verify(over_digest, b"tampered", ec.ECDSA(hashes.SHA256()))


def test_agreement_equals_the_peers_computation(conn):
    x = Key.generate(conn, KeyType.X25519, "x")
    peer = x25519.X25519PrivateKey.generate()
    peer_public = peer.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert x.agree(peer_public) == peer.exchange(x25519.X25519PublicKey.from_public_bytes(x.public_key))
    p = Key.generate(conn, KeyType.P256, "p")
    peer = ec.generate_private_key(ec.SECP256R1())
    shared = peer.exchange(ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p.public_key))
    expected = X963KDF(hashes.SHA256(), 32, b"info").derive(shared)
    assert p.agree(p256_point(peer.public_key()), AgreementAlgorithm.STANDARD_X963_SHA256,
                   requested_size=32, shared_info=b"info") == expected


@pytest.mark.parametrize("algorithm,derives_iv", [
    (EncryptionAlgorithm.ECIES_COFACTOR_VARIABLE_IV_X963_SHA256_AESGCM, True),
    (EncryptionAlgorithm.ECIES_STANDARD_X963_SHA256_AESGCM, False),
])
def test_ecies_matches_apples_scheme_computed_with_cryptography(conn, algorithm, derives_iv):
    key = Key.generate(conn, KeyType.P256, "inbox", extractable=True)
    stored = private_bytes(conn, key)
    private = ec.derive_private_key(int.from_bytes(stored[65:], "big"), ec.SECP256R1())
    # keychaind's ciphertext opens with cryptography...
    ciphertext = key.encrypt(MESSAGE, algorithm)
    point = ciphertext[:65]
    aes_key, iv = apple_ecies_key(private.exchange(ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256R1(), point)), point, derives_iv)
    assert AESGCM(aes_key).decrypt(iv, ciphertext[65:], None) == MESSAGE
    # ...and cryptography's opens in keychaind.
    ephemeral = ec.generate_private_key(ec.SECP256R1())
    point = p256_point(ephemeral.public_key())
    aes_key, iv = apple_ecies_key(ephemeral.exchange(ec.ECDH(), ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256R1(), key.public_key)), point, derives_iv)
    assert key.decrypt(point + AESGCM(aes_key).encrypt(iv, MESSAGE, None), algorithm) == MESSAGE


def test_sealed_boxes_round_trip_and_carry_an_ephemeral_key(conn):
    key = Key.generate(conn, KeyType.X25519, "inbox")
    first, second = key.encrypt(MESSAGE), key.encrypt(MESSAGE)
    assert len(first) == len(MESSAGE) + 48 and first[:32] != second[:32]
    assert key.decrypt(first) == MESSAGE and key.decrypt(second) == MESSAGE


@pytest.mark.parametrize("key_type", [KeyType.P256, KeyType.X25519])
def test_a_tampered_ciphertext_or_another_keys_is_param(conn, key_type):
    key = Key.generate(conn, key_type, "mine")
    other = Key.generate(conn, key_type, "theirs")
    ciphertext = bytearray(key.encrypt(MESSAGE))
    ciphertext[-1] ^= 1
    for bad in (bytes(ciphertext), bytes(ciphertext[:10]), b"", other.encrypt(MESSAGE)):
        with pytest.raises(KeychainError) as e:
            key.decrypt(bad)
        assert e.value.status == Status.PARAM
    assert key.decrypt(key.encrypt(MESSAGE)) == MESSAGE


def test_an_ed25519_key_does_not_encrypt_and_an_x25519_key_does_not_sign(conn):
    ed = Key.generate(conn, KeyType.ED25519, "e")
    with pytest.raises(KeychainError) as e:
        ed.encrypt(MESSAGE)
    assert e.value.status == Status.PARAM
    with pytest.raises(KeychainError) as e:
        ed.encrypt(MESSAGE, EncryptionAlgorithm.SEALED_BOX_X25519)
    assert e.value.status == Status.PARAM
    x = Key.generate(conn, KeyType.X25519, "x")
    with pytest.raises(KeychainError) as e:
        x.sign(MESSAGE, SigningAlgorithm.ED25519)
    assert e.value.status == Status.PARAM


def test_while_locked_a_key_is_encrypted_to_but_does_not_decrypt(conn):
    key = Key.generate(conn, KeyType.P256, "inbox")
    conn.set_passcode("1234")
    conn.lock()
    ciphertext = key.encrypt(MESSAGE)
    with pytest.raises(KeychainError) as e:
        key.decrypt(ciphertext)
    assert e.value.status == Status.INTERACTION_NOT_ALLOWED
    conn.unlock("1234")
    assert key.decrypt(ciphertext) == MESSAGE


def test_a_non_extractable_keys_bytes_do_not_come_back(conn):
    original = ec.generate_private_key(ec.SECP256R1())
    scalar = original.private_numbers().private_value.to_bytes(32, "big")
    key = Key.import_private_key(conn, p256_point(original.public_key()) + scalar, KeyType.P256, "imported")
    assert key.public_key == p256_point(original.public_key())
    with pytest.raises(KeychainError) as e:
        private_bytes(conn, key)
    assert e.value.status == Status.PARAM


def test_delete_removes_the_key(conn):
    key = Key.generate(conn, KeyType.X25519, "gone")
    key.delete()
    assert Key.find(conn, label="gone") == []
    with pytest.raises(KeychainError) as e:
        key.encrypt(MESSAGE)
    assert e.value.status == Status.ITEM_NOT_FOUND
