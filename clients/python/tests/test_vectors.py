"""The golden vectors of Tests/Vectors read by an independent reader.

Written from the format descriptions (docs/security.md "Key hierarchy" and "What the database
file shows", docs/backup-format.md, docs/sync.md sections 2-6, the comments of each vector
file), not from the Swift code, with crypto of its own: libsodium through PyNaCl
(XChaCha20-Poly1305, Argon2id, Ed25519, X25519) and BLAKE2b from hashlib. Every golden vector
must open and verify here; every negative vector (Tests/Vectors/negative) must fail here, as
it must in the Swift reader (NegativeVectorTests).

PyNaCl is a test dependency only: the client library stays standard-library only.
"""

import hashlib
import pathlib
import struct

import pytest

nacl = pytest.importorskip("nacl")
from nacl import bindings, exceptions, pwhash, signing  # noqa: E402

VECTORS = pathlib.Path(__file__).resolve().parents[3] / "Tests" / "Vectors"


class FormatError(Exception):
    """What this reader raises for any input it refuses: the Swift reader's KeychainError."""


# --- the vector file syntax (Tests/Vectors/README.md) ------------------------------------------


def read_fields(path):
    fields, current = {}, None
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("#") or not line.strip():
            continue
        if line[0].isspace() and current is not None:
            fields[current] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        assert sep, f"{path.name}: cannot read {line!r}"
        key = key.strip()
        assert key not in fields, f"{path.name}: {key} appears twice"
        fields[key] = value.strip()
        current = key
    return {key: parse_value(value) for key, value in fields.items()}


def parse_value(value):
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return value[1:-1]
    if value.isdigit():
        return int(value)
    return bytes(int(token, 16) for token in value.split())


class Vector(dict):
    def b(self, key):
        value = self[key]
        assert isinstance(value, bytes), f"{key} is not hex bytes"
        return value

    def t(self, key):
        value = self[key]
        assert isinstance(value, str), f"{key} is not a quoted text"
        return value.encode()


def golden(name):
    return Vector(read_fields(VECTORS / name))


def golden_files(prefix):
    return sorted(p.name for p in VECTORS.glob(prefix + "-v*.hex"))


# --- primitives --------------------------------------------------------------------------------


def u32(n):
    return struct.pack("<I", n)


def i64(n):
    return struct.pack("<q", n)


def lp(data):
    return u32(len(data)) + data


def blake2b(data, size=32, key=b""):
    return hashlib.blake2b(data, digest_size=size, key=key).digest()


def kdf(master, subkey_id, context):
    """libsodium's crypto_kdf_derive_from_key: BLAKE2b-256 keyed by the master key, the subkey id
    (u64 LE) as salt and the 8-byte context as personalisation, over nothing."""
    assert len(context) == 8
    return hashlib.blake2b(b"", digest_size=32, key=master, salt=struct.pack("<Q", subkey_id) + bytes(8),
                           person=context + bytes(8)).digest()


def aead_open(key, nonce_and_sealed, aad):
    """nonce (24) || XChaCha20-Poly1305 ciphertext || tag (16)."""
    if len(nonce_and_sealed) < 24 + 16:
        raise FormatError("sealed box cut short")
    try:
        return bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(nonce_and_sealed[24:], aad,
                                                                    nonce_and_sealed[:24], key)
    except exceptions.CryptoError as error:
        raise FormatError("does not open") from error


def argon2id(password, salt, ops, mem):
    return pwhash.argon2id.kdf(32, password, salt, opslimit=ops, memlimit=mem)


def ed25519_verify(public_key, message, signature):
    try:
        signing.VerifyKey(public_key).verify(message, signature)
    except (exceptions.BadSignatureError, ValueError, TypeError) as error:
        raise FormatError("signature does not verify") from error


def digits(h16):
    """32 decimal digits in eight groups of four: the 16 bytes big-endian, mod 10^32."""
    text = "%032d" % (int.from_bytes(h16, "big") % 10**32)
    return " ".join(text[i:i + 4] for i in range(0, 32, 4))


class Reader:
    """A cursor over bytes that refuses to read past the end."""

    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, n):
        if n < 0 or self.at + n > len(self.data):
            raise FormatError("cut short")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def u8(self):
        return self.take(1)[0]

    def u16(self):
        return struct.unpack("<H", self.take(2))[0]

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def i64(self):
        return struct.unpack("<q", self.take(8))[0]

    def lp(self):
        return self.take(self.u32())

    def end(self):
        if self.at != len(self.data):
            raise FormatError("bytes after the end")


def decode_dictionary(reader):
    """docs/protocol.md section 3, "Values and dictionaries"."""
    out = {}
    for _ in range(reader.u32()):
        key = reader.take(reader.u16()).decode()
        kind = reader.u8()
        if kind == 1:
            value = reader.lp().decode()
        elif kind == 2:
            value = reader.lp()
        elif kind == 3:
            value = reader.i64()
        elif kind == 4:
            value = bool(reader.u8())
        elif kind == 5:
            value = struct.unpack("<d", reader.take(8))[0]
        else:
            raise FormatError(f"{key} has unknown value type {kind}")
        if key in out:
            raise FormatError(f"{key} twice")
        out[key] = value
    return out


def item_attributes(v, pdmn=None, sync=None):
    """The item every vector holds, as its attribute dictionary."""
    out = {name: v[name] for name in ("acct", "svce", "labl", "agrp")}
    out["pdmn"] = pdmn or v["pdmn"]
    out["sync"] = v["sync"] if sync is None else sync
    out["cdat"] = float(v["cdat"])
    out["mdat"] = float(v["mdat"])
    return out


# --- the device key and the keybag (docs/security.md, "Key hierarchy") ---------------------------

# Key class numbers (docs/security.md): the AAD of a class key's wrap and the keybag record.
KEY_CLASS = {"ak": 6, "ck": 7, "dk": 8, "aku": 9, "cku": 10, "dku": 11, "akpu": 12}
ALWAYS = {"dk", "dku"}


def open_keybag(record, device_key, passcode):
    """The class keys of a keybag record, the passcode ones only with the right passcode."""
    r = Reader(record)
    version = r.u8()
    if version != 1:
        raise FormatError(f"keybag version {version}")
    has_passcode = r.u8()
    if has_passcode not in (0, 1):
        raise FormatError("passcode flag")
    salt, ops, mem = (r.lp(), r.u64(), r.u64()) if has_passcode else (None, None, None)
    wrapped = {}
    for _ in range(r.u8()):
        number = r.u8()
        wrapped[number] = r.lp()
    r.end()
    wrap_key = kdf(device_key, 1, b"keybag__")
    kek = None
    if has_passcode and passcode is not None:
        kek = blake2b(b"keychaind/v1/kek" + argon2id(passcode, salt, ops, mem), key=device_key)
    keys = {}
    for name, number in KEY_CLASS.items():
        if number not in wrapped:
            continue
        by_passcode = bool(has_passcode) and name not in ALWAYS
        if by_passcode and kek is None:
            continue
        aad = b"keychaind/v1/classkey" + bytes([number, 1 if by_passcode else 0])
        keys[name] = aead_open(kek if by_passcode else wrap_key, wrapped[number], aad)
    return {"salt": salt, "ops": ops, "mem": mem, "keys": keys, "nonces": {
        name: wrapped[n][:24] for name, n in KEY_CLASS.items() if n in wrapped}}


@pytest.mark.parametrize("name", golden_files("device-key"))
def test_the_device_key_file_is_the_32_byte_key(name):
    assert len(golden(name).b("file")) == 32


@pytest.mark.parametrize("name", golden_files("keybag"))
def test_the_keybag_unwraps_every_class_key_under_the_device_key_and_the_passcode(name):
    v = golden(name)
    bag = open_keybag(v.b("record"), v.b("device_key"), v.t("passcode"))
    assert (bag["salt"], bag["ops"], bag["mem"]) == (v.b("salt"), v["argon2_ops"], v["argon2_mem_bytes"])
    for cls in KEY_CLASS:
        assert bag["keys"][cls] == v.b("class_key_" + cls), cls
        assert bag["nonces"][cls] == v.b("nonce_" + cls), cls


@pytest.mark.parametrize("name", golden_files("keybag"))
def test_without_the_passcode_only_the_always_class_keys_open(name):
    v = golden(name)
    assert set(open_keybag(v.b("record"), v.b("device_key"), None)["keys"]) == ALWAYS


# --- a sealed item (docs/security.md, "Key hierarchy" and "What the database file shows") --------

# Hashed lookup columns of a class, in their fixed order (labl first, as every class has it).
LOOKUP_COLUMNS = {"genp": ("labl", "acct", "svce")}


def lookup_hash(device_key, code, value):
    """BLAKE2b-128(key = lookup key, domain || 00 || value): the domain is the attribute code."""
    return blake2b(code.encode() + b"\x00" + value, size=16, key=kdf(device_key, 2, b"lookup__"))


def row_identity(v):
    out = lp(v.t("class")) + lp(v.t("pdmn")) + lp(v.t("agrp")) + struct.pack("<Q", v["sync"]) + lp(v.b("persistent_id"))
    for code in LOOKUP_COLUMNS[v["class"]]:
        out += b"\x01" + lp(lookup_hash(v.b("device_key"), code, v.t(code)))
    return out


def open_item(blob, identity, class_key):
    if not blob or blob[0] != 1:
        raise FormatError("item format")
    aad = b"keychaind/v1/item" + b"\x01" + identity
    wrapped_key_length = 24 + 32 + 16
    item_key = aead_open(class_key, blob[1:1 + wrapped_key_length], aad)
    return aead_open(item_key, blob[1 + wrapped_key_length:], aad)


@pytest.mark.parametrize("name", golden_files("sealed-item"))
def test_the_row_identity_holds_the_keyed_hashes_of_the_lookup_columns(name):
    v = golden(name)
    assert row_identity(v) == v.b("identity")


@pytest.mark.parametrize("name", golden_files("sealed-item"))
def test_the_sealed_item_opens_with_its_class_key_to_its_secret_and_attributes(name):
    v = golden(name)
    blob = v.b("blob")
    assert blob[1:25] == v.b("key_nonce") and blob[1 + 72:1 + 72 + 24] == v.b("data_nonce")
    plaintext = open_item(blob, v.b("identity"), v.b("class_key"))
    assert plaintext == v.b("plaintext")
    r = Reader(plaintext)
    assert r.lp() == v.t("secret")
    assert decode_dictionary(r) == item_attributes(v)
    r.end()


# --- a backup file (docs/backup-format.md) -----------------------------------------------------


def read_backup_header(data):
    r = Reader(data)
    if r.take(8) != b"KCBACKUP":
        raise FormatError("not a backup")
    version = r.u16()
    if version != 1:
        raise FormatError(f"backup version {version}")
    if r.u8() != 1:
        raise FormatError("unknown KDF")
    header = {"ops": r.u64(), "mem": r.u64(), "salt": r.take(16), "items": r.u32(), "excluded": r.u32(),
              "note": r.lp().decode()}
    header["length"] = r.at
    return header


def open_backup(data, password):
    header = read_backup_header(data)
    r = Reader(data)
    r.take(header["length"])
    sealed = r.lp()
    r.end()
    key = argon2id(password, header["salt"], header["ops"], header["mem"])
    return header, aead_open(key, sealed, data[:header["length"]])


@pytest.mark.parametrize("name", golden_files("backup"))
def test_the_backup_header_reads_without_the_password(name):
    v = golden(name)
    header = read_backup_header(v.b("file"))
    assert v.b("file")[:header["length"]] == v.b("header")
    assert (header["ops"], header["mem"], header["salt"]) == (v["argon2_ops"], v["argon2_mem_bytes"], v.b("salt"))
    assert (header["items"], header["excluded"], header["note"]) == (v["items"], v["excluded"], v["note"])


@pytest.mark.parametrize("name", golden_files("backup"))
def test_the_backup_opens_with_its_password_to_its_items(name):
    v = golden(name)
    _, payload = open_backup(v.b("file"), v.t("password"))
    assert v.b("file")[len(v.b("header")) + 4:][:24] == v.b("nonce")
    assert payload == v.b("payload")
    r = Reader(payload)
    items = [decode_dictionary(r) for _ in range(r.u32())]
    r.end()
    expected = item_attributes(v)
    expected.update({"class": v["class"], "v_Data": v.t("secret")})
    assert items == [expected]


# --- sync: identity, circle key, records (docs/sync.md 2 and 4) ---------------------------------


class Device:
    def __init__(self, sign_seed, kx_secret):
        self.sign_seed, self.kx_secret = sign_seed, kx_secret
        self.signer = signing.SigningKey(sign_seed)
        self.sign_pk = bytes(self.signer.verify_key)
        self.kx_pk = bindings.crypto_scalarmult_base(kx_secret)
        h = blake2b(b"keychaind/v1/device" + self.sign_pk + self.kx_pk)
        self.id, self.fingerprint = h[:16], digits(h[16:])

    def sign(self, message):
        return self.signer.sign(message).signature


def device_id_of(sign_pk, kx_pk):
    return blake2b(b"keychaind/v1/device" + sign_pk + kx_pk)[:16]


@pytest.mark.parametrize("name", golden_files("sync-identity"))
def test_the_identity_gives_its_public_keys_id_and_fingerprint(name):
    v = golden(name)
    d = Device(v.b("sign_seed"), v.b("kx_secret"))
    assert (d.sign_pk, d.kx_pk, d.id, d.fingerprint) == (v.b("sign_pk"), v.b("kx_pk"), v.b("device_id"), v["fingerprint"])


def open_identity(sealed, device_id, class_key):
    secrets = aead_open(class_key, sealed, b"keychaind/v1/sync-identity" + device_id)
    if len(secrets) != 64:
        raise FormatError("identity length")
    d = Device(secrets[:32], secrets[32:])
    if d.id != device_id:
        raise FormatError("identity of another device")
    return d


@pytest.mark.parametrize("name", golden_files("sync-identity"))
def test_the_locally_sealed_identity_opens_under_the_ck_class_key(name):
    v = golden(name)
    assert v.b("sealed")[:24] == v.b("nonce")
    d = open_identity(v.b("sealed"), v.b("device_id"), v.b("class_key"))
    assert (d.sign_seed, d.kx_secret) == (v.b("sign_seed"), v.b("kx_secret"))


CLASS_NUMBER = {"genp": 1, "inet": 2, "cert": 3, "keys": 4}


def pk_field(value):
    """A primary-key attribute as record ids encode it (docs/sync.md 2.2): strings and data by
    their bytes, a number by its decimal text."""
    if isinstance(value, str):
        value = value.encode()
    elif isinstance(value, int):
        value = str(value).encode()
    return b"\x00" + lp(value)


def record_id(cck, cls, attributes):
    assert cls == "genp"
    message = b"keychaind/v1/record-id" + bytes([CLASS_NUMBER[cls]])
    for code in ("agrp", "sync", "acct", "svce"):
        message += pk_field(attributes[code])
    return message, blake2b(message, key=kdf(cck, 2, b"syncid__"))


def record_aad(circle_id, rid, epoch, mdat, writer, counter, tombstone):
    return (b"keychaind/v1/sync-record" + circle_id + rid + u32(epoch) + i64(mdat) + writer + i64(counter)
            + bytes([1 if tombstone else 0]))


def unpad(plaintext):
    if len(plaintext) == 0 or len(plaintext) % 256:
        raise FormatError("not padded to 256")
    body = plaintext.rstrip(b"\x00")
    if not body.endswith(b"\x80"):
        raise FormatError("padding")
    return body[:-1]


def open_record(cck, circle_id, rid, epoch, mdat, writer, counter, tombstone, body):
    """A row of sync_records: the item's class, pdmn number and attributes, or its tombstone."""
    plaintext = unpad(aead_open(kdf(cck, 1, b"syncseal"), body,
                                record_aad(circle_id, rid, epoch, mdat, writer, counter, tombstone)))
    r = Reader(plaintext)
    if r.u8() != 1:
        raise FormatError("record format")
    cls = {n: c for c, n in CLASS_NUMBER.items()}.get(r.u8())
    if cls is None:
        raise FormatError("class")
    if tombstone:
        r.end()
        return cls, None, None
    pdmn = r.u8()
    if pdmn not in (6, 7, 8):
        raise FormatError("a ThisDeviceOnly class in a record")
    attributes = decode_dictionary(r)
    r.end()
    if attributes.get("sync") != 1:
        raise FormatError("a record without sync = 1")
    if record_id(cck, cls, attributes)[1] != rid:
        raise FormatError("the attributes do not give the row's record id")
    return cls, pdmn, attributes


def record_row(v, **change):
    row = dict(cck=v.b("cck"), circle_id=v.b("circle_id"), rid=v.b("record_id"), epoch=v["epoch"],
               mdat=v["version_mdat"], writer=v.b("writer"), counter=v["counter"], tombstone=False, body=v.b("body"))
    row.update(change)
    return row


def sync_item(v):
    out = item_attributes(v, pdmn="ck", sync=1)
    out.update({"class": "genp", "v_Data": v.t("secret")})
    return out


@pytest.mark.parametrize("name", golden_files("sync-record"))
def test_the_record_id_is_the_keyed_hash_of_class_and_primary_key(name):
    v = golden(name)
    assert kdf(v.b("cck"), 1, b"syncseal") == v.b("rsk")
    assert kdf(v.b("cck"), 2, b"syncid__") == v.b("rik")
    assert record_id(v.b("cck"), "genp", sync_item(v)) == (v.b("record_id_message"), v.b("record_id"))


@pytest.mark.parametrize("name", golden_files("sync-record"))
def test_the_record_opens_to_its_item_and_the_tombstone_to_its_class(name):
    v = golden(name)
    row = record_row(v)
    assert record_aad(row["circle_id"], row["rid"], row["epoch"], row["mdat"], row["writer"], row["counter"],
                      False) == v.b("aad")
    assert open_record(**row) == ("genp", KEY_CLASS["ck"], sync_item(v))
    assert open_record(**record_row(v, tombstone=True, body=v.b("tombstone_body"))) == ("genp", None, None)


@pytest.mark.parametrize("name", golden_files("sync-record"))
def test_the_circle_key_is_kept_sealed_under_the_ck_class_key(name):
    v = golden(name)
    aad = b"keychaind/v1/sync-circle-key" + v.b("circle_id") + u32(v["epoch"])
    assert aead_open(v.b("class_key"), v.b("local_sealed"), aad) == v.b("cck")


# --- sync: roster, wrapped keys, heads, join requests (docs/sync.md 3 and 6) ----------------------

FOUND, ADD, REMOVE, LEAVE = 0, 1, 2, 3
ENTRY_LENGTH = 161


def parse_entry(data):
    r = Reader(data)
    e = dict(n=r.u32(), prev=r.take(32), kind=r.u8(), circle_id=r.take(16), epoch=r.u32(), subject=r.take(16),
             sign_pk=r.take(32), kx_pk=r.take(32), time=r.i64(), signer=r.take(16))
    r.end()
    return e


def verify_roster(entries):
    """Signed entries [(entry bytes, signature)] to the members {id: (sign_pk, kx_pk)}, the epoch
    and the roster hash; raises FormatError for any entry that does not chain or verify."""
    members, departed, keys = {}, set(), {}
    prev, circle_id, epoch = bytes(32), None, 0
    if not entries:
        raise FormatError("an empty roster")
    for n, (data, signature) in enumerate(entries):
        e = parse_entry(data)
        if e["n"] != n or e["prev"] != prev:
            raise FormatError(f"entry {n} does not chain")
        if device_id_of(e["sign_pk"], e["kx_pk"]) != e["subject"]:
            raise FormatError(f"entry {n}: the subject id is not the hash of its keys")
        if n == 0:
            if e["kind"] != FOUND or e["signer"] != e["subject"] or e["epoch"] != 1:
                raise FormatError("entry 0 is not a founding")
            circle_id = e["circle_id"]
            signer_pk = e["sign_pk"]
        else:
            if e["circle_id"] != circle_id:
                raise FormatError(f"entry {n} of another circle")
            if e["kind"] == LEAVE:
                if e["signer"] != e["subject"] or e["subject"] not in members or e["epoch"] != epoch:
                    raise FormatError(f"entry {n}: a bad leave")
                signer_pk = e["sign_pk"]
            else:
                if e["signer"] not in members:
                    raise FormatError(f"entry {n} signed by a non-member")
                signer_pk = members[e["signer"]][0]
                if e["kind"] == ADD:
                    if e["subject"] in members or e["subject"] in departed or e["epoch"] != epoch:
                        raise FormatError(f"entry {n}: a bad add")
                elif e["kind"] == REMOVE:
                    if e["epoch"] != epoch + 1 or (e["subject"] not in members and e["subject"] not in departed):
                        raise FormatError(f"entry {n}: a bad remove")
                else:
                    raise FormatError(f"entry {n}: kind {e['kind']}")
        ed25519_verify(signer_pk, b"keychaind/v1/roster" + data, signature)
        if e["kind"] in (FOUND, ADD):
            members[e["subject"]] = (e["sign_pk"], e["kx_pk"])
        else:
            members.pop(e["subject"], None)
            departed.add(e["subject"])
        keys[e["subject"]] = (e["sign_pk"], e["kx_pk"])
        epoch, prev = e["epoch"], blake2b(data)
    return dict(members=members, epoch=epoch, hash=prev, length=len(entries), circle_id=circle_id,
                fingerprint=digits(blake2b(b"keychaind/v1/circle" + entries[0][0])[16:]))


def wrap_key(own_kx_secret, wrapper_kx_pk, recipient_kx_pk, peer_kx_pk, circle_id, epoch):
    shared = bindings.crypto_scalarmult(own_kx_secret, peer_kx_pk)
    if shared == bytes(32):
        raise FormatError("a small-order key")
    return blake2b(b"keychaind/v1/sync-wrap" + wrapper_kx_pk + recipient_kx_pk + circle_id + u32(epoch), key=shared)


def unwrap(roster, recipient, wrapper_id, epoch, wrapped, signature):
    """The circle key a member wrapped to `recipient` (a Device), checked as docs/sync.md 3 says."""
    if epoch != roster["epoch"] or recipient.id not in roster["members"] or wrapper_id not in roster["members"]:
        raise FormatError("a wrap of another epoch, to a non-member or by one")
    circle_id = roster["circle_id"]
    wrapper_sign_pk, wrapper_kx_pk = roster["members"][wrapper_id]
    head = circle_id + u32(epoch) + recipient.id + wrapper_id
    ed25519_verify(wrapper_sign_pk, b"keychaind/v1/sync-wrapped-key" + head + wrapped, signature)
    key = wrap_key(recipient.kx_secret, wrapper_kx_pk, recipient.kx_pk, wrapper_kx_pk, circle_id, epoch)
    return aead_open(key, wrapped, head)


def verify_head(roster, epoch, device_id, counter, roster_length, roster_hash, signature):
    if device_id not in roster["members"]:
        raise FormatError("a head of a non-member")
    if epoch > roster["epoch"]:
        raise FormatError("a head of an epoch the roster has not reached")
    if roster_length <= roster["length"] and (roster_length != roster["length"] or roster_hash != roster["hash"]):
        raise FormatError("a head naming another roster")
    message = (b"keychaind/v1/head" + roster["circle_id"] + u32(epoch) + device_id + i64(counter) + u32(roster_length)
               + roster_hash)
    ed25519_verify(roster["members"][device_id][0], message, signature)
    return counter


def verify_join(circle_id, sign_pk, kx_pk, name, signature):
    if len(name) > 64:
        raise FormatError("a name over 64 bytes")
    message = b"keychaind/v1/sync-join" + circle_id + device_id_of(sign_pk, kx_pk) + sign_pk + kx_pk + lp(name)
    ed25519_verify(sign_pk, message, signature)


def devices(v):
    return Device(v.b("a_sign_seed"), v.b("a_kx_secret")), Device(v.b("b_sign_seed"), v.b("b_kx_secret"))


def roster_entries(v):
    return [(v.b("entry_0"), v.b("sig_0")), (v.b("entry_1"), v.b("sig_1"))]


@pytest.mark.parametrize("name", golden_files("sync-roster"))
def test_the_roster_entries_are_as_the_format_says(name):
    v = golden(name)
    a, b = devices(v)
    circle = v.b("circle_id")
    entry_0 = u32(0) + bytes(32) + bytes([FOUND]) + circle + u32(1) + a.id + a.sign_pk + a.kx_pk + i64(v["time_0"]) + a.id
    entry_1 = (u32(1) + blake2b(entry_0) + bytes([ADD]) + circle + u32(1) + b.id + b.sign_pk + b.kx_pk + i64(v["time_1"])
               + a.id)
    assert (entry_0, entry_1) == (v.b("entry_0"), v.b("entry_1"))
    assert len(entry_0) == ENTRY_LENGTH


@pytest.mark.parametrize("name", golden_files("sync-roster"))
def test_the_roster_verifies_to_its_members_and_circle_fingerprint(name):
    v = golden(name)
    a, b = devices(v)
    roster = verify_roster(roster_entries(v))
    assert set(roster["members"]) == {a.id, b.id}
    assert (roster["epoch"], roster["hash"], roster["fingerprint"]) == (1, v.b("roster_hash"), v["circle_fingerprint"])


@pytest.mark.parametrize("name", golden_files("sync-roster"))
def test_the_wrapped_key_opens_for_the_approved_device_alone(name):
    v = golden(name)
    a, b = devices(v)
    roster = verify_roster(roster_entries(v))
    assert v.b("wrapped")[:24] == v.b("wrap_nonce")
    assert unwrap(roster, b, a.id, 1, v.b("wrapped"), v.b("wrap_sig")) == v.b("cck")
    # The wrapper derives the same key from its side of the exchange.
    assert wrap_key(a.kx_secret, a.kx_pk, b.kx_pk, b.kx_pk, v.b("circle_id"), 1) == \
        wrap_key(b.kx_secret, a.kx_pk, b.kx_pk, a.kx_pk, v.b("circle_id"), 1)
    with pytest.raises(FormatError):
        unwrap(roster, a, a.id, 1, v.b("wrapped"), v.b("wrap_sig"))


@pytest.mark.parametrize("name", golden_files("sync-roster"))
def test_the_head_verifies_against_the_roster(name):
    v = golden(name)
    a, _ = devices(v)
    roster = verify_roster(roster_entries(v))
    assert verify_head(roster, 1, a.id, v["head_counter"], 2, roster["hash"], v.b("head_sig")) == v["head_counter"]


@pytest.mark.parametrize("name", golden_files("sync-roster"))
def test_the_join_request_is_signed_by_the_joining_device(name):
    v = golden(name)
    _, b = devices(v)
    verify_join(v.b("circle_id"), b.sign_pk, b.kx_pk, v.t("join_name"), v.b("join_sig"))
    assert b.fingerprint == digits(blake2b(b"keychaind/v1/device" + b.sign_pk + b.kx_pk)[16:])


# --- negative vectors (Tests/Vectors/negative): inputs every reader must refuse -------------------

ERRORS = {"errSecDecode", "errSecAuthFailed", "errSecUnimplemented", "errSecNotAvailable", "refused"}


def negative_cases():
    for path in sorted((VECTORS / "negative").glob("*.hex")):
        fields = read_fields(path)
        base = read_fields(VECTORS / fields.pop("base"))
        shared = {k: val for k, val in fields.items() if "." not in k}
        names = sorted({k.split(".", 1)[0] for k in fields if "." in k})
        for name in names:
            case = Vector(base)
            case.update(shared)
            case.update({k.split(".", 1)[1]: val for k, val in fields.items() if k.startswith(name + ".")})
            yield pytest.param(path.stem, name, case, id=f"{path.stem}/{name}")


def refuse_sealed_item(v):
    open_item(v.b("blob"), v.b("identity"), v.b("class_key"))


def refuse_keybag(v):
    bag = open_keybag(v.b("record"), v.b("device_key"), v.t("passcode"))
    if set(bag["keys"]) != set(KEY_CLASS):
        raise FormatError("a class key is missing")


def refuse_backup(v):
    _, payload = open_backup(v.b("file"), v.t("password"))
    r = Reader(payload)
    [decode_dictionary(r) for _ in range(r.u32())]
    r.end()


def refuse_sync_identity(v):
    open_identity(v.b("sealed"), v.b("device_id"), v.b("class_key"))


def refuse_sync_record(v):
    if v.get("row_epoch", v["epoch"]) != v["epoch"]:
        raise FormatError("a row of another epoch than the key's")
    open_record(v.b("cck"), v.b("circle_id"), v.b("record_id"), v["epoch"], v["version_mdat"], v.b("writer"),
                v["counter"], bool(v.get("tombstone", 0)), v.b("body"))


def refuse_sync_roster(v, case):
    kind = case.split("-", 1)[0]
    entries = []
    while f"entry_{len(entries)}" in v:
        entries.append((v.b(f"entry_{len(entries)}"), v.b(f"sig_{len(entries)}")))
    if kind == "roster":
        verify_roster(entries)
        return
    roster = verify_roster(entries)
    a, b = devices(v)
    if kind == "wrap":
        unwrap(roster, b, v.get("wrapper_id", a.id), v.get("wrap_epoch", 1), v.b("wrapped"), v.b("wrap_sig"))
    elif kind == "head":
        verify_head(roster, v.get("head_epoch", 1), v.get("head_device", a.id), v["head_counter"],
                    v.get("head_roster_length", 2), v.get("head_roster_hash", roster["hash"]), v.b("head_sig"))
    elif kind == "join":
        verify_join(v.b("circle_id"), b.sign_pk, b.kx_pk, v.t("join_name"), v.b("join_sig"))
    else:
        raise AssertionError(f"unknown case kind {kind}")


@pytest.mark.parametrize("fmt,case,v", list(negative_cases()))
def test_the_negative_vector_is_refused(fmt, case, v):
    assert v["error"] in ERRORS
    with pytest.raises(FormatError):
        if fmt == "sync-roster":
            refuse_sync_roster(v, case)
        else:
            globals()["refuse_" + fmt.replace("-", "_")](v)


def test_every_format_has_negative_vectors():
    formats = {p.stem for p in (VECTORS / "negative").glob("*.hex")}
    assert formats == {"sealed-item", "keybag", "backup", "sync-identity", "sync-record", "sync-roster"}
