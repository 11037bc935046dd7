"""libkeychaind-pkcs11.so (docs/pkcs11.md) through real PKCS#11 consumers: OpenSC's pkcs11-tool,
with SoftHSM2 as the yardstick for the same list (a test SoftHSM2 fails is a bad test), OpenSSL's
pkcs11 engine in a mutual-TLS handshake, and, through ctypes, what the tools cannot show:
the lock, fork, C_Initialize's silence and a hostile answer."""

import ctypes
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from keychaind_client import Connection, Key, KeyType

crypto = pytest.importorskip("cryptography", reason="scripts/test-python installs cryptography from PyPI")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, utils  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402
import datetime  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MODULE = os.environ.get("KEYCHAIND_PKCS11", os.path.join(ROOT, ".build", "pkcs11", "libkeychaind-pkcs11.so"))
SOFTHSM = "/usr/lib/softhsm/libsofthsm2.so"
ENGINE = "/usr/lib/x86_64-linux-gnu/engines-3/pkcs11.so"
PIN = "1234"


@pytest.fixture(scope="session", autouse=True)
def built_module():
    """The module as `make pkcs11` builds it (make test runs it through scripts/test-python)."""
    subprocess.run(["make", "-s", "-C", ROOT, "pkcs11"], check=True)
    assert os.path.exists(MODULE)


# MARK: the two tokens the same tests run against

class KeychaindToken:
    name = "keychaind"

    def __init__(self, daemon):
        self.daemon = daemon
        self.module = MODULE
        self.env = dict(os.environ, KEYCHAIN_SOCKET=daemon.socket)


class SoftHSMToken:
    name = "softhsm"

    def __init__(self, root):
        tokens = os.path.join(root, "tokens")
        os.mkdir(tokens)
        conf = os.path.join(root, "softhsm2.conf")
        with open(conf, "w") as f:
            f.write("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\n" % tokens)
        self.module = SOFTHSM
        self.env = dict(os.environ, SOFTHSM2_CONF=conf)
        subprocess.run(["softhsm2-util", "--init-token", "--free", "--label", "yardstick", "--pin", PIN,
                        "--so-pin", "5678"], env=self.env, check=True, capture_output=True)


@pytest.fixture(params=["keychaind", "softhsm"])
def token(request, daemon):
    if request.param == "keychaind":
        yield KeychaindToken(daemon)
    else:
        root = tempfile.mkdtemp(prefix="kcp11.", dir="/tmp")
        try:
            yield SoftHSMToken(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)


def tool(token, *args, check=True):
    # A PIN for SoftHSM2; keychaind's C_Login takes it and never uses it as the passcode.
    result = subprocess.run(["pkcs11-tool", "--module", token.module, "--login", "--pin", PIN] + list(args),
                            env=token.env, capture_output=True, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result


def id_of(token, label):
    """The CKA_ID of the key labelled so, from --list-objects: keychaind's is the key's klbl,
    which no template chooses, and pkcs11-tool --sign finds its key by ID, not by label."""
    blocks = tool(token, "--list-objects", "--type", "privkey").stdout.decode().split("Private Key Object")
    for block in blocks:
        lines = [line.strip() for line in block.splitlines()]
        if "label:      " + label in lines:
            return [line.split(":", 1)[1].strip() for line in lines if line.startswith("ID:")][0]
    raise AssertionError("no key labelled %s" % label)


def public_key(token, label, root):
    path = os.path.join(root, "pub.der")
    tool(token, "--read-object", "--type", "pubkey", "--id", id_of(token, label), "-o", path)
    with open(path, "rb") as f:
        return serialization.load_der_public_key(f.read())


@pytest.fixture
def scratch():
    root = tempfile.mkdtemp(prefix="kcp11.", dir="/tmp")
    yield root
    shutil.rmtree(root, ignore_errors=True)


# MARK: pkcs11-tool, against keychaind and SoftHSM2

def test_keypairgen_makes_a_p256_key_that_list_objects_shows(token):
    tool(token, "--keypairgen", "--key-type", "EC:prime256v1", "--label", "web-tls")
    listing = tool(token, "--list-objects").stdout.decode()
    assert "Private Key Object; EC" in listing and "Public Key Object; EC" in listing
    assert "label:      web-tls" in listing


def test_pkcs11_tool_test_finds_no_error_with_a_key_pair_on_the_token(token):
    # keychaind's token has no digests and no RNG (CKR_RANDOM_NO_RNG, which --test skips), and
    # --test signs, verifies and decrypts with RSA keys only: what it checks here is that every
    # call it makes is answered as the standard allows.
    tool(token, "--keypairgen", "--key-type", "EC:prime256v1", "--label", "tested")
    result = tool(token, "--test")
    assert "No errors" in result.stdout.decode(), result.stdout.decode()


@pytest.fixture
def keychaind_token(daemon):
    return KeychaindToken(daemon)


# keychaind only: SoftHSM2 2.6 offers CKM_ECDSA but not CKM_ECDSA_SHA256.
def test_a_p256_signature_of_a_message_from_pkcs11_tool_verifies(keychaind_token, scratch):
    token = keychaind_token
    tool(token, "--keypairgen", "--key-type", "EC:prime256v1", "--label", "signer", "--id", "01")
    message = os.path.join(scratch, "message")
    with open(message, "wb") as f:
        f.write(b"sign me, through PKCS#11")
    signature = os.path.join(scratch, "sig")
    tool(token, "--sign", "--mechanism", "ECDSA-SHA256", "--id", id_of(token, "signer"), "-i", message, "-o", signature)
    with open(signature, "rb") as f:
        raw = f.read()
    assert len(raw) == 64  # r || s, as PKCS#11 gives ECDSA signatures
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public_key(token, "signer", scratch).verify(der, b"sign me, through PKCS#11", ec.ECDSA(hashes.SHA256()))


def test_an_ecdsa_signature_of_a_digest_verifies(token, scratch):
    tool(token, "--keypairgen", "--key-type", "EC:prime256v1", "--label", "digest-signer", "--id", "02")
    digest = hashes.Hash(hashes.SHA256())
    digest.update(b"hashed elsewhere")
    value = digest.finalize()
    path = os.path.join(scratch, "digest")
    with open(path, "wb") as f:
        f.write(value)
    signature = os.path.join(scratch, "sig")
    tool(token, "--sign", "--mechanism", "ECDSA", "--id", id_of(token, "digest-signer"), "-i", path, "-o", signature)
    raw = open(signature, "rb").read()
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public_key(token, "digest-signer", scratch).verify(der, value, ec.ECDSA(utils.Prehashed(hashes.SHA256())))


def test_an_ed25519_signature_from_pkcs11_tool_verifies(token, scratch):
    tool(token, "--keypairgen", "--key-type", "EC:edwards25519", "--label", "ed", "--id", "03")
    message = os.path.join(scratch, "message")
    with open(message, "wb") as f:
        f.write(b"an Ed25519 message")
    signature = os.path.join(scratch, "sig")
    key_id = id_of(token, "ed")
    tool(token, "--sign", "--mechanism", "EDDSA", "--id", key_id, "-i", message, "-o", signature)
    raw = open(signature, "rb").read()
    assert len(raw) == 64
    # The public key from the token's CKA_EC_POINT: a DER OCTET STRING of the 32 bytes.
    listing = tool(token, "--list-objects", "--type", "pubkey", "--id", key_id).stdout.decode()
    blob = bytes.fromhex([line.split(":", 1)[1].split()[0] for line in listing.splitlines() if "EC_POINT:" in line][0])
    assert blob[:2] == b"\x04\x20"
    ed25519.Ed25519PublicKey.from_public_bytes(blob[2:]).verify(raw, b"an Ed25519 message")


def test_p11tool_lists_the_key_pair_with_its_pkcs11_uris(token):
    tool(token, "--keypairgen", "--key-type", "EC:prime256v1", "--label", "gnutls", "--id", "04")
    listing = subprocess.run(["p11tool", "--provider", token.module, "--login", "--list-all"], capture_output=True,
                             timeout=60, env=dict(token.env, GNUTLS_PIN=PIN))
    assert listing.returncode == 0, listing.stderr
    out = listing.stdout.decode()
    assert "object=gnutls;type=private" in out and "object=gnutls;type=public" in out
    assert "Type: Private key (EC/ECDSA-SECP256R1)" in out


# MARK: keychaind's own rules, through pkcs11-tool

def keychaind_tool(daemon, *args, env=None):
    return subprocess.run(["pkcs11-tool", "--module", MODULE] + list(args), capture_output=True, timeout=60,
                          env=dict(env or os.environ, KEYCHAIN_SOCKET=daemon.socket))


def test_a_key_keychain_made_is_listed_with_its_klbl_as_id_and_its_certificate_beside_it(daemon, conn):
    key = Key.generate(conn, KeyType.P256, "mtls")
    conn.add({"class": "cert", "v_Data": certificate_for(key.public_key, "client.example"), "labl": "mtls"})
    listing = keychaind_tool(daemon, "--list-objects").stdout.decode()
    klbl = key.attributes["klbl"].hex()
    assert listing.count("ID:         " + klbl) == 3, listing  # private key, public key, certificate
    assert "Certificate Object; type = X.509 cert" in listing
    assert "subject:    DN: CN=client.example" in listing


def test_a_private_keys_value_is_sensitive_even_when_keychain_would_let_it_out(daemon, conn, monkeypatch):
    Key.generate(conn, KeyType.P256, "sealed", extractable=True)
    monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
    p11 = Cryptoki()
    assert p11.initialize() == CKR_OK
    try:
        _, session = p11.open()
        [key] = p11.private_key(session, "sealed")
        value = Attribute(CKA_VALUE, None, 0)
        assert p11.lib.C_GetAttributeValue(ctypes.c_ulong(session), ctypes.c_ulong(key), ctypes.byref(value), ctypes.c_ulong(1)) == CKR_ATTRIBUTE_SENSITIVE
        assert value.length == ctypes.c_ulong(-1).value  # CK_UNAVAILABLE_INFORMATION
    finally:
        p11.C_Finalize(None)


def test_no_daemon_is_an_empty_slot_and_not_an_error():
    result = subprocess.run(["pkcs11-tool", "--module", MODULE, "--list-slots"], capture_output=True, timeout=30,
                            env=dict(os.environ, KEYCHAIN_SOCKET="/tmp/no-keychaind-here.sock"))
    assert result.returncode == 0
    assert b"(empty)" in result.stdout


def test_another_apps_key_is_not_found(start_daemon):
    python = os.path.realpath(sys.executable)
    tool_path = os.path.realpath(shutil.which("pkcs11-tool"))
    d = start_daemon('[[app]]\nid = "a"\nuids = [%d]\nexecutables = ["%s"]\ngroups = ["a"]\n'
                     '[[app]]\nid = "b"\nuids = [%d]\nexecutables = ["%s"]\ngroups = ["b"]\n'
                     % (os.getuid(), python, os.getuid(), tool_path))
    c = Connection(d.socket)
    try:
        Key.generate(c, KeyType.P256, "a-only")
    finally:
        c.close()
    listing = keychaind_tool(d, "--list-objects")
    assert listing.returncode == 0
    assert b"a-only" not in listing.stdout
    made = keychaind_tool(d, "--keypairgen", "--key-type", "EC:prime256v1", "--label", "b-own")
    assert made.returncode == 0, made.stderr
    assert b"b-own" in keychaind_tool(d, "--list-objects").stdout


def test_nss_lists_the_certificate_and_its_key_once_modutil_adds_the_module(daemon, conn, scratch):
    key = Key.generate(conn, KeyType.P256, "browser")
    conn.add({"class": "cert", "v_Data": certificate_for(key.public_key, "browser.example"), "labl": "browser"})
    nss = "sql:" + scratch
    env = dict(os.environ, KEYCHAIN_SOCKET=daemon.socket)
    run = lambda *args, **kw: subprocess.run(list(args), capture_output=True, timeout=60, env=env, **kw)
    assert run("certutil", "-N", "-d", nss, "--empty-password").returncode == 0
    added = run("modutil", "-dbdir", nss, "-add", "keychaind", "-libfile", MODULE, "-force", input=b"\n")
    assert added.returncode == 0, added.stdout + added.stderr
    certificates = run("certutil", "-L", "-h", "all", "-d", nss)
    assert certificates.returncode == 0, certificates.stderr
    assert b"keychaind:browser" in certificates.stdout
    keys = run("certutil", "-K", "-h", "keychaind", "-d", nss)
    assert key.attributes["klbl"].hex().encode() in keys.stdout, keys.stdout + keys.stderr


# MARK: OpenSSL: a mutual-TLS handshake whose client key is in keychaind

def certificate_for(point, name, issuer_key=None, issuer_name=None, dns=None):
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    issuer_key = issuer_key or ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name or "test CA")]))
               .public_key(public).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1)))
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
    if name == issuer_name:  # the CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def test_openssl_s_client_and_curl_complete_mutual_tls_with_a_key_keychaind_made(daemon, conn, scratch):
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_point = ca_key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    ca = x509.load_der_x509_certificate(certificate_for(ca_point, "test CA", ca_key, "test CA"))
    write = lambda name, data: open(os.path.join(scratch, name), "wb").write(data) and os.path.join(scratch, name)
    ca_pem = write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_point = server_key.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    server_pem = write("server.pem", x509.load_der_x509_certificate(certificate_for(server_point, "localhost", ca_key, dns="localhost")).public_bytes(serialization.Encoding.PEM))
    server_key_pem = write("server.key", server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    key = Key.generate(conn, KeyType.P256, "client-tls")
    client_der = certificate_for(key.public_key, "client.example", ca_key)
    conn.add({"class": "cert", "v_Data": client_der, "labl": "client-tls"})
    client_pem = write("client.pem", x509.load_der_x509_certificate(client_der).public_bytes(serialization.Encoding.PEM))
    config = write("openssl.cnf", ("openssl_conf = init\n[init]\nengines = engines\n[engines]\npkcs11 = pkcs11\n"
                                   "[pkcs11]\nengine_id = pkcs11\ndynamic_path = %s\nMODULE_PATH = %s\n"
                                   % (ENGINE, MODULE)).encode())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["openssl", "s_server", "-accept", "127.0.0.1:%d" % port, "-cert", server_pem, "-key", server_key_pem,
                               "-CAfile", ca_pem, "-Verify", "1", "-verify_return_error", "-www"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        time.sleep(0.5)
        env = dict(os.environ, KEYCHAIN_SOCKET=daemon.socket, OPENSSL_CONF=config)
        client = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile", ca_pem,
                                 "-engine", "pkcs11", "-keyform", "engine", "-key", "pkcs11:token=keychaind;object=client-tls;type=private",
                                 "-cert", client_pem, "-verify_return_error", "-brief"],
                                input=b"GET / HTTP/1.0\r\n\r\n", capture_output=True, env=env, timeout=60)
        output = (client.stdout + client.stderr).decode(errors="replace")
        assert client.returncode == 0, output
        assert "Peer certificate: CN = localhost" in output or "CONNECTION ESTABLISHED" in output, output
        # curl, the "done when": the same key through the engine form of --key.
        fetched = subprocess.run(["curl", "--silent", "--show-error", "--cacert", ca_pem, "--engine", "pkcs11", "--key-type", "ENG",
                                  "--key", "pkcs11:token=keychaind;object=client-tls;type=private", "--cert", client_pem,
                                  "https://localhost:%d/" % port, "--resolve", "localhost:%d:127.0.0.1" % port],
                                 capture_output=True, env=env, timeout=60)
        assert fetched.returncode == 0, fetched.stderr
        assert b"client.example" in fetched.stdout or b"Ciphers" in fetched.stdout, fetched.stdout
    finally:
        server.terminate()
        seen = server.communicate(timeout=10)[0].decode(errors="replace")
    # The server verified the client's certificate (-Verify with -verify_return_error), whose
    # only private key is in keychaind: the handshake's CertificateVerify was signed there.
    assert "CN = client.example" in seen, seen


# MARK: through ctypes: what no tool shows

CKR_OK, CKR_USER_NOT_LOGGED_IN, CKR_CRYPTOKI_NOT_INITIALIZED = 0, 0x101, 0x190
CKF_SERIAL_SESSION = 4
CKA_CLASS, CKA_LABEL, CKA_VALUE = 0, 3, 0x11
CKR_ATTRIBUTE_SENSITIVE = 0x11
CKO_PRIVATE_KEY = 3
CKM_ECDSA_SHA256 = 0x1044
NAMES = ("C_Initialize C_Finalize C_GetInfo C_GetFunctionList C_GetSlotList C_GetSlotInfo C_GetTokenInfo "
         "C_GetMechanismList C_GetMechanismInfo C_InitToken C_InitPIN C_SetPIN C_OpenSession C_CloseSession "
         "C_CloseAllSessions C_GetSessionInfo C_GetOperationState C_SetOperationState C_Login C_Logout "
         "C_CreateObject C_CopyObject C_DestroyObject C_GetObjectSize C_GetAttributeValue C_SetAttributeValue "
         "C_FindObjectsInit C_FindObjects C_FindObjectsFinal").split()


class Attribute(ctypes.Structure):
    _fields_ = [("type", ctypes.c_ulong), ("value", ctypes.c_void_p), ("length", ctypes.c_ulong)]


class Mechanism(ctypes.Structure):
    _fields_ = [("mechanism", ctypes.c_ulong), ("parameter", ctypes.c_void_p), ("length", ctypes.c_ulong)]


class Cryptoki:
    """The module's function list, called as a host does."""

    def __init__(self, path=MODULE):
        self.lib = ctypes.CDLL(path)
        self.lib.C_GetFunctionList.argtypes = [ctypes.c_void_p]
        self.lib.C_GetFunctionList.restype = ctypes.c_ulong

    def __getattr__(self, name):
        function = getattr(self.lib, name)
        function.restype = ctypes.c_ulong
        return function

    def initialize(self):
        return self.lib.C_Initialize(None)

    def slots(self, present=True):
        count = ctypes.c_ulong(0)
        rv = self.lib.C_GetSlotList(ctypes.c_ubyte(1 if present else 0), None, ctypes.byref(count))
        return rv, count.value

    def open(self):
        handle = ctypes.c_ulong(0)
        rv = self.lib.C_OpenSession(ctypes.c_ulong(1), ctypes.c_ulong(CKF_SERIAL_SESSION), None, None, ctypes.byref(handle))
        return rv, handle.value

    def private_key(self, session, label):
        cls = ctypes.c_ulong(CKO_PRIVATE_KEY)
        name = ctypes.create_string_buffer(label.encode(), len(label))
        template = (Attribute * 2)(Attribute(CKA_CLASS, ctypes.cast(ctypes.byref(cls), ctypes.c_void_p), ctypes.sizeof(cls)),
                                   Attribute(CKA_LABEL, ctypes.cast(name, ctypes.c_void_p), len(label)))
        assert self.lib.C_FindObjectsInit(ctypes.c_ulong(session), template, ctypes.c_ulong(2)) == CKR_OK
        found = (ctypes.c_ulong * 4)()
        count = ctypes.c_ulong(0)
        assert self.lib.C_FindObjects(ctypes.c_ulong(session), found, ctypes.c_ulong(4), ctypes.byref(count)) == CKR_OK
        assert self.lib.C_FindObjectsFinal(ctypes.c_ulong(session)) == CKR_OK
        return list(found[:count.value])

    def sign(self, session, key, data):
        mechanism = Mechanism(CKM_ECDSA_SHA256, None, 0)
        rv = self.lib.C_SignInit(ctypes.c_ulong(session), ctypes.byref(mechanism), ctypes.c_ulong(key))
        if rv != CKR_OK:
            return rv, None
        signature = ctypes.create_string_buffer(64)
        length = ctypes.c_ulong(64)
        rv = self.lib.C_Sign(ctypes.c_ulong(session), data, ctypes.c_ulong(len(data)), signature, ctypes.byref(length))
        return rv, signature.raw[:length.value]


def test_a_locked_keychain_refuses_the_same_signature_with_CKR_USER_NOT_LOGGED_IN(daemon, conn, monkeypatch):
    conn.set_passcode("correct horse")
    Key.generate(conn, KeyType.P256, "locked-key")
    monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
    p11 = Cryptoki()
    assert p11.initialize() == CKR_OK
    try:
        rv, session = p11.open()
        assert rv == CKR_OK
        [key] = p11.private_key(session, "locked-key")
        rv, signature = p11.sign(session, key, b"before the lock")
        assert rv == CKR_OK and len(signature) == 64
        conn.lock()  # lock_grace_seconds = 0: the when-unlocked class key goes at once
        assert p11.sign(session, key, b"after the lock")[0] == CKR_USER_NOT_LOGGED_IN
        conn.unlock("correct horse")
        assert p11.sign(session, key, b"unlocked again")[0] == CKR_OK
    finally:
        p11.C_Finalize(None)


CKR_FUNCTION_CANCELED = 0x50


def test_a_key_that_asks_first_asks_at_keychainds_prompt_in_c_sign_and_a_cancel_is_canceled(start_daemon, monkeypatch):
    """Issue 29: C_Sign goes through keySign, so keychaind asks the person (its own prompt,
    here the scripted pinentry of the Swift tests) once per signature; the module adds nothing."""
    prompt = tempfile.mkdtemp(prefix="kcpp.", dir="/tmp")
    try:
        answers, log = os.path.join(prompt, "answers"), os.path.join(prompt, "pinentry.log")
        program = os.path.join(prompt, "pinentry")
        with open(program, "w") as f:
            f.write("#!/bin/sh\nFAKE_PINENTRY_ANSWERS=\"$(cat '%s')\" FAKE_PINENTRY_LOG='%s' exec %s\n"
                    % (answers, log, os.path.join(ROOT, "Tests", "SecretServiceScripts", "fake_pinentry.py")))
        os.chmod(program, 0o700)
        with open(answers, "w") as f:
            f.write("correct horse")
        daemon = start_daemon('[prompt]\npinentry = "%s"\ndisplay = ":99"\n' % program)
        conn = Connection(daemon.socket)
        conn.set_passcode("correct horse")
        conn.key_generate({"type": 73, "kcls": 1, "labl": "asks-first", "extr": 0, "accc": "ak;1"})
        monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
        p11 = Cryptoki()
        assert p11.initialize() == CKR_OK

        def prompts():
            with open(log) as f:
                return sum(1 for line in f if line.startswith("SETDESC "))
        try:
            rv, session = p11.open()
            assert rv == CKR_OK
            [key] = p11.private_key(session, "asks-first")
            rv, signature = p11.sign(session, key, b"allowed")
            assert rv == CKR_OK and len(signature) == 64
            assert prompts() == 1
            with open(answers, "w") as f:
                f.write("cancel")
            assert p11.sign(session, key, b"refused")[0] == CKR_FUNCTION_CANCELED
            assert prompts() == 2
        finally:
            p11.C_Finalize(None)
            conn.close()
        # The same through OpenSC's pkcs11-tool: refused while the person cancels, signed once
        # they type the passcode.
        token = KeychaindToken(daemon)
        message = os.path.join(prompt, "message")
        with open(message, "wb") as f:
            f.write(b"through pkcs11-tool")
        signature = os.path.join(prompt, "sig")
        command = ("--sign", "--mechanism", "ECDSA-SHA256", "--id", id_of(token, "asks-first"), "-i", message, "-o", signature)
        refused = tool(token, *command, check=False)
        assert refused.returncode != 0 and b"CKR_FUNCTION_CANCELED" in refused.stderr
        # pkcs11-tool tries twice (C_Sign, then C_SignUpdate and C_SignFinal): one prompt each.
        assert prompts() == 4
        with open(answers, "w") as f:
            f.write("correct horse")
        tool(token, *command)
        assert prompts() == 5
        with open(signature, "rb") as f:
            assert len(f.read()) == 64
    finally:
        shutil.rmtree(prompt, ignore_errors=True)


def test_a_forked_child_must_initialize_again_and_never_uses_its_parents_connection(daemon, conn, monkeypatch):
    Key.generate(conn, KeyType.P256, "forked")
    monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
    p11 = Cryptoki()
    assert p11.initialize() == CKR_OK
    try:
        rv, session = p11.open()
        [key] = p11.private_key(session, "forked")
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if p11.open()[0] != CKR_CRYPTOKI_NOT_INITIALIZED: code |= 1
                if p11.sign(session, key, b"child")[0] != CKR_CRYPTOKI_NOT_INITIALIZED: code |= 2
                if p11.initialize() != CKR_OK: code |= 4
                rv, own = p11.open()
                [child_key] = p11.private_key(own, "forked")
                for _ in range(20):
                    if p11.sign(own, child_key, b"child")[0] != CKR_OK: code |= 8
            except BaseException:
                code |= 16
            os._exit(code)
        # The parent signs on its own connection meanwhile: answers never cross.
        for _ in range(20):
            rv, signature = p11.sign(session, key, b"parent")
            assert rv == CKR_OK and len(signature) == 64
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
    finally:
        p11.C_Finalize(None)


class FakeDaemon:
    """A socket that records what the module sends and answers with `answer(request)`."""

    def __init__(self, answer):
        self.root = tempfile.mkdtemp(prefix="kcp11f.", dir="/tmp")
        self.path = os.path.join(self.root, "s.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.accepted = 0
        self.received = b""
        self.answer = answer
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self.talk, args=(c,), daemon=True).start()

    def talk(self, c):
        with c:
            while True:
                head = c.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                body = c.recv(struct.unpack("<I", head)[0], socket.MSG_WAITALL)
                self.received += head + body
                c.sendall(self.answer(body))

    def close(self):
        self.server.close()
        shutil.rmtree(self.root, ignore_errors=True)


def unlocked_status(_request):
    value = b"unlocked"
    entry = struct.pack("<H", 5) + b"state" + b"\x01" + struct.pack("<I", len(value)) + value
    payload = b"\x01" + struct.pack("<i", 0) + struct.pack("<I", 0) + b"\x01" + b"\x03" + struct.pack("<I", 1) + entry
    return struct.pack("<I", len(payload)) + payload


def test_c_initialize_never_connects_and_the_first_slot_call_does(monkeypatch):
    fake = FakeDaemon(unlocked_status)
    try:
        monkeypatch.setenv("KEYCHAIN_SOCKET", fake.path)
        p11 = Cryptoki()
        assert p11.initialize() == CKR_OK
        time.sleep(0.2)
        assert fake.accepted == 0
        assert p11.slots() == (CKR_OK, 1)
        assert fake.accepted >= 1
        p11.C_Finalize(None)
    finally:
        fake.close()


def test_a_pin_given_to_c_login_never_reaches_the_socket(monkeypatch):
    fake = FakeDaemon(unlocked_status)
    try:
        monkeypatch.setenv("KEYCHAIN_SOCKET", fake.path)
        p11 = Cryptoki()
        assert p11.initialize() == CKR_OK
        rv, session = p11.open()
        assert rv == CKR_OK
        pin = b"pin-that-is-not-the-passcode"
        assert p11.lib.C_Login(ctypes.c_ulong(session), ctypes.c_ulong(1), pin, ctypes.c_ulong(len(pin))) == CKR_OK
        assert pin not in fake.received
        p11.C_Finalize(None)
    finally:
        fake.close()


def test_a_socket_that_never_answers_is_no_token():
    fake = FakeDaemon(lambda _request: b"")  # reads the request, answers nothing
    try:
        result = subprocess.run([sys.executable, "-c", "import test_pkcs11 as t\np = t.Cryptoki(); assert p.initialize() == 0\n"
                                 "print(p.slots())"], capture_output=True, timeout=60,
                                env=dict(os.environ, PYTHONPATH=HERE, KEYCHAIN_SOCKET=fake.path))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == b"(0, 0)"
    finally:
        fake.close()


@pytest.mark.parametrize("answer", [
    struct.pack("<I", 0xFFFFFFFF),                                    # a length over any limit
    struct.pack("<I", 16) + b"\x01" + b"\x00" * 15,                   # a frame too short for its parts
    struct.pack("<I", 14) + b"\x01\x00\x00\x00\x00" + struct.pack("<I", 0xFFFFFF00) + b"\x01\x03\x00\x00",  # a message past the end
], ids=["huge-length", "truncated", "message-past-the-end"])
def test_a_hostile_answer_is_no_token_and_no_crash(answer):
    fake = FakeDaemon(lambda _request: answer)
    try:
        # In a process of its own: a crash there fails this test instead of ending the run.
        result = subprocess.run([sys.executable, "-c", "import test_pkcs11 as t\np = t.Cryptoki(); assert p.initialize() == 0\n"
                                 "print(p.slots())"], capture_output=True, timeout=60,
                                env=dict(os.environ, PYTHONPATH=HERE, KEYCHAIN_SOCKET=fake.path))
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == b"(0, 0)"
    finally:
        fake.close()


class EcdhParameters(ctypes.Structure):
    _fields_ = [("kdf", ctypes.c_ulong), ("shared_length", ctypes.c_ulong), ("shared", ctypes.c_void_p),
                ("public_length", ctypes.c_ulong), ("public", ctypes.c_void_p)]


def test_ecdh1_derive_gives_the_secret_the_peer_computes(daemon, conn, monkeypatch):
    key = Key.generate(conn, KeyType.P256, "agree")
    peer = ec.generate_private_key(ec.SECP256R1())
    point = peer.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
    p11 = Cryptoki()
    assert p11.initialize() == CKR_OK
    try:
        _, session = p11.open()
        [base] = p11.private_key(session, "agree")
        data = ctypes.create_string_buffer(point, len(point))
        parameters = EcdhParameters(1, 0, None, len(point), ctypes.cast(data, ctypes.c_void_p))  # CKD_NULL
        mechanism = Mechanism(0x1050, ctypes.cast(ctypes.byref(parameters), ctypes.c_void_p), ctypes.sizeof(parameters))
        derived = ctypes.c_ulong(0)
        assert p11.lib.C_DeriveKey(ctypes.c_ulong(session), ctypes.byref(mechanism), ctypes.c_ulong(base), None,
                                   ctypes.c_ulong(0), ctypes.byref(derived)) == CKR_OK
        value = ctypes.create_string_buffer(64)
        attribute = Attribute(CKA_VALUE, ctypes.cast(value, ctypes.c_void_p), 64)
        assert p11.lib.C_GetAttributeValue(ctypes.c_ulong(session), derived, ctypes.byref(attribute), ctypes.c_ulong(1)) == CKR_OK
        ours = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key.public_key)
        assert value.raw[:attribute.length] == peer.exchange(ec.ECDH(), ours)
        # A peer off the curve is refused, not answered.
        bad = ctypes.create_string_buffer(b"\x04" + bytes(64), 65)
        parameters.public = ctypes.cast(bad, ctypes.c_void_p)
        assert p11.lib.C_DeriveKey(ctypes.c_ulong(session), ctypes.byref(mechanism), ctypes.c_ulong(base), None,
                                   ctypes.c_ulong(0), ctypes.byref(derived)) == 0x71  # CKR_MECHANISM_PARAM_INVALID
    finally:
        p11.C_Finalize(None)


# MARK: OpenSSH: ssh -I logs in with a key keychaind made

SSH_USER = "kcsshtest"  # the account the Swift sshd tests use (a shell, no usable password)


def start_sshd(directory):
    """sshd on 127.0.0.1, ready when its log says it listens; another port when one was taken."""
    for _ in range(5):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(os.path.join(directory, "sshd_config"), "w") as f:
            f.write("ListenAddress 127.0.0.1\nPort %d\nHostKey %s/host_key\nPidFile %s/sshd.pid\n"
                    "AuthorizedKeysFile %s/authorized_keys\nAuthenticationMethods publickey\nPubkeyAuthentication yes\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nAllowUsers %s\n"
                    % (port, directory, directory, directory, SSH_USER))
        log = os.path.join(directory, "sshd.log")
        sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-E", log, "-f", os.path.join(directory, "sshd_config")])
        deadline = time.time() + 30
        while time.time() < deadline:
            text = open(log).read() if os.path.exists(log) else ""
            if "listening on 127.0.0.1 port %d" % port in text:
                return sshd, port
            if sshd.poll() is not None:
                break
            time.sleep(0.05)
        sshd.kill()
        sshd.wait()
        if "Address already in use" not in text:
            raise RuntimeError("sshd did not start: " + text)
    raise RuntimeError("sshd found each of 5 ports taken")


def test_ssh_logs_in_with_the_module_as_its_pkcs11_provider(daemon, conn, scratch):
    if subprocess.run(["id", SSH_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", SSH_USER], check=True)
    subprocess.run(["usermod", "--password", "*", SSH_USER], check=True)
    os.makedirs("/run/sshd", exist_ok=True)
    key = Key.generate(conn, KeyType.P256, "ssh-login")
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key.public_key)
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(scratch, "host_key")], check=True)
    with open(os.path.join(scratch, "authorized_keys"), "wb") as f:
        f.write(line + b"\n")
    os.chmod(scratch, 0o755)
    os.chmod(os.path.join(scratch, "authorized_keys"), 0o644)
    sshd, port = start_sshd(scratch)
    try:
        login = subprocess.run(["ssh", "-F", "/dev/null", "-I", MODULE, "-o", "BatchMode=yes", "-o", "IdentityAgent=none",
                                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                                "-o", "PreferredAuthentications=publickey", "-p", str(port), "%s@127.0.0.1" % SSH_USER,
                                "echo logged-in-as-$(id -un)"],
                               capture_output=True, timeout=60, env=dict(os.environ, KEYCHAIN_SOCKET=daemon.socket))
        assert b"logged-in-as-" + SSH_USER.encode() in login.stdout, login.stderr + open(os.path.join(scratch, "sshd.log"), "rb").read()
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


def test_eight_threads_sign_at_once_each_in_its_own_session(daemon, conn, monkeypatch):
    key = Key.generate(conn, KeyType.P256, "threads")
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key.public_key)
    monkeypatch.setenv("KEYCHAIN_SOCKET", daemon.socket)
    p11 = Cryptoki()
    assert p11.initialize() == CKR_OK
    failures = []

    def signer(n):
        # Whatever goes wrong in a thread is a failure of the test, not a warning beside a pass.
        try:
            sign_in_own_session(n)
        except Exception as error:
            failures.append(("raised", repr(error)))

    def sign_in_own_session(n):
        rv, session = p11.open()
        if rv != CKR_OK:
            failures.append(("open", rv))
            return
        found = p11.private_key(session, "threads")
        if len(found) != 1:
            failures.append(("find", len(found)))
            return
        [handle] = found
        for i in range(25):
            message = b"thread %d message %d" % (n, i)
            rv, raw = p11.sign(session, handle, message)
            if rv != CKR_OK:
                failures.append(("sign", rv))
                continue
            der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
            try:
                public.verify(der, message, ec.ECDSA(hashes.SHA256()))
            except Exception as error:  # an answer that crossed to another thread's session
                failures.append(("verify", repr(error)))
        p11.C_CloseSession(ctypes.c_ulong(session))

    try:
        threads = [threading.Thread(target=signer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
    finally:
        p11.C_Finalize(None)


# MARK: the protected authentication path: keychaind asks for the passcode itself (op 53)

FAKE_PINENTRY = os.path.join(ROOT, "Tests", "SecretServiceScripts", "fake_pinentry.py")
PASSCODE = "correct horse"


class PromptedKeychain:
    """A keychaind with a passcode and a P-256 key, locked, whose [prompt] pinentry (the
    scripted one the Swift tests use) answers `answers` in turn and logs what it was told."""

    def __init__(self, start_daemon, root, answers):
        self.log = os.path.join(root, "pinentry.log")
        program = os.path.join(root, "pinentry")
        with open(program, "w") as f:
            f.write("#!/bin/sh\nFAKE_PINENTRY_ANSWERS='%s' FAKE_PINENTRY_LOG='%s' exec %s\n"
                    % (",".join(answers), self.log, FAKE_PINENTRY))
        os.chmod(program, 0o755)
        self.daemon = start_daemon('[prompt]\npinentry = "%s"\ndisplay = ":99"\n' % program)
        self.conn = Connection(self.daemon.socket)
        self.conn.set_passcode(PASSCODE)
        key = Key.generate(self.conn, KeyType.P256, "behind-the-lock")
        self.key_id = key.attributes["klbl"].hex()
        self.public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), key.public_key)
        self.conn.lock()

    def said(self):
        return open(self.log).read() if os.path.exists(self.log) else ""

    def state(self):
        return self.conn.status()["state"]

    def sign(self, scratch, *login):
        message = os.path.join(scratch, "message")
        with open(message, "wb") as f:
            f.write(b"signed after keychaind asked")
        signature = os.path.join(scratch, "sig")
        return subprocess.run(["pkcs11-tool", "--module", MODULE] + list(login) +
                              ["--sign", "--mechanism", "ECDSA-SHA256", "--id", self.key_id, "-i", message, "-o", signature],
                              capture_output=True, timeout=120, env=dict(os.environ, KEYCHAIN_SOCKET=self.daemon.socket)), signature


def test_the_token_has_a_protected_authentication_path(daemon):
    # CKF_PROTECTED_AUTHENTICATION_PATH, which OpenSC shows as a PIN pad: hosts log in with no PIN.
    listing = keychaind_tool(daemon, "--list-token-slots")
    assert listing.returncode == 0, listing.stderr
    assert b"PIN pad present" in listing.stdout, listing.stdout


def test_pkcs11_tool_login_on_a_locked_keychain_signs_once_keychaind_asked_for_the_passcode(start_daemon, scratch):
    k = PromptedKeychain(start_daemon, scratch, [PASSCODE])
    result, signature = k.sign(scratch, "--login", "--login-type", "user")
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    raw = open(signature, "rb").read()
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    k.public.verify(der, b"signed after keychaind asked", ec.ECDSA(hashes.SHA256()))
    assert k.state() == "unlocked"
    # The prompt named pkcs11-tool, the program the kernel reports, and never saw a PIN.
    assert "SETDESC " + os.path.realpath(shutil.which("pkcs11-tool")) + " (pid " in k.said(), k.said()


def test_a_cancelled_prompt_fails_the_login_with_CKR_FUNCTION_CANCELED(start_daemon, scratch):
    k = PromptedKeychain(start_daemon, scratch, ["cancel"])
    result, _ = k.sign(scratch, "--login")
    assert result.returncode != 0
    assert b"CKR_FUNCTION_CANCELED" in result.stderr, result.stderr
    assert k.state() == "locked"


def test_the_right_passcode_given_as_the_pin_is_never_taken_as_the_passcode(start_daemon, scratch):
    k = PromptedKeychain(start_daemon, scratch, ["cancel"])
    result, _ = k.sign(scratch, "--login", "--pin", PASSCODE)
    assert result.returncode != 0
    assert b"CKR_FUNCTION_CANCELED" in result.stderr, result.stderr
    assert k.state() == "locked"
    assert PASSCODE not in k.said()


def test_c_logout_after_a_prompted_login_does_not_lock_the_keychain(start_daemon, scratch, monkeypatch):
    k = PromptedKeychain(start_daemon, scratch, [PASSCODE])
    monkeypatch.setenv("KEYCHAIN_SOCKET", k.daemon.socket)
    p11 = Cryptoki()
    assert p11.initialize() == CKR_OK
    try:
        rv, session = p11.open()
        assert rv == CKR_OK
        assert p11.lib.C_Login(ctypes.c_ulong(session), ctypes.c_ulong(1), None, ctypes.c_ulong(0)) == CKR_OK
        assert k.state() == "unlocked"
        assert p11.lib.C_Logout(ctypes.c_ulong(session)) == CKR_OK
        assert k.state() == "unlocked"
        [key] = p11.private_key(session, "behind-the-lock")
        assert p11.sign(session, key, b"after the logout")[0] == CKR_OK
    finally:
        p11.C_Finalize(None)
