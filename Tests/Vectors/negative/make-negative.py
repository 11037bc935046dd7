#!/usr/bin/env python3
"""Writes the negative vectors of Tests/Vectors/negative from the golden ones (run once; the
output is committed and never edited, like the golden vectors). Each case is a golden input
with one thing wrong, made here with the formats' own crypto (PyNaCl, hashlib) where the case
needs a valid tag or signature over the wrong thing, so that the readers reach the check
behind the AEAD or the signature. Usage (in the .venv of scripts/test-python):
    .venv/bin/python Tests/Vectors/negative/make-negative.py
"""

import hashlib
import pathlib
import struct
import sys

from nacl import bindings, signing

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "clients" / "python" / "tests"))
import test_vectors as tv  # noqa: E402  (the independent reader's primitives)


def flip(data, index, bit=0x01):
    out = bytearray(data)
    out[index] ^= bit
    return bytes(out)


def hexlines(data):
    tokens = ["%02x" % b for b in data]
    lines = [" ".join(tokens[i:i + 32]) for i in range(0, len(tokens), 32)] or [""]
    return "\n    ".join(lines)


class Writer:
    def __init__(self, name, base, header):
        self.name, self.lines = name, ["# " + line if line else "#" for line in header.strip("\n").split("\n")]
        self.lines.append('base: "%s"' % base)

    def shared(self, key, value):
        self.lines.append("%s: %s" % (key, self.encode(value)))

    def case(self, name, why, error, **fields):
        self.lines.append("")
        self.lines.append("# " + why)
        for key, value in fields.items():
            self.lines.append("%s.%s: %s" % (name, key, self.encode(value)))
        self.lines.append('%s.error: "%s"' % (name, error))

    @staticmethod
    def encode(value):
        if isinstance(value, bytes):
            return hexlines(value)
        if isinstance(value, int):
            return str(value)
        return '"%s"' % value

    def write(self):
        (HERE / self.name).write_text("\n".join(self.lines) + "\n", encoding="utf-8")


def seal(key, nonce, plaintext, aad):
    return nonce + bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, nonce, key)


def sealed_item():
    v = tv.golden("sealed-item-v1.hex")
    blob, identity = v.b("blob"), v.b("identity")
    w = Writer("sealed-item.hex", "sealed-item-v1.hex", """
Sealed items that must not open (ItemSealer.open: blob, identity, class_key; the rest from the base).
""")
    w.case("tag-bit", "the data ciphertext's tag with one bit flipped", "errSecDecode", blob=flip(blob, len(blob) - 1))
    w.case("key-tag-bit", "the wrapped item key's tag with one bit flipped", "errSecDecode", blob=flip(blob, 72, 0x80))
    w.case("truncated", "cut inside the wrapped item key", "errSecDecode", blob=blob[:60])
    w.case("version", "format byte 2, which no reader knows", "errSecDecode", blob=b"\x02" + blob[1:])
    moved = identity.replace(tv.lp(b"uid.0"), tv.lp(b"uid.1"))
    assert moved != identity
    w.case("other-access-group", "the row's identity (the AAD) names another access group: a row edited or moved",
           "errSecDecode", identity=moved)
    w.case("other-class-key", "opened with the ck class key instead of ak's", "errSecDecode",
           class_key=bytes(range(0x70, 0x90)))
    w.write()


def keybag():
    v = tv.golden("keybag-v1.hex")
    record = v.b("record")
    # ak is the first wrapped key: version, flag, u32+salt (20), ops, mem, count = 39 bytes,
    # then number and u32 length: its wrap starts at 44 and is 24 + 32 + 16 bytes long.
    ak_end = 44 + 72
    assert record[39] == 6 and record[44:68] == v.b("nonce_ak")
    dk_start = 44 + 72 + 5 + 72 + 5
    assert record[dk_start - 5] == 8 and record[dk_start:dk_start + 24] == v.b("nonce_dk")
    w = Writer("keybag.hex", "keybag-v1.hex", """
Keybag records that must not open, or not unlock (Keybag(deviceKey:record:) then unlock(passcode:)).
""")
    w.case("wrong-passcode", "the passcode with one letter changed", "errSecAuthFailed", passcode="correct horsf")
    w.case("passcode-wrap-bit", "ak's wrap (under the passcode) with a tag bit flipped: unlock cannot tell it from"
           " a wrong passcode", "errSecAuthFailed", record=flip(record, ak_end - 1))
    w.case("device-wrap-bit", "dk's wrap (under the device key) with a tag bit flipped", "errSecDecode",
           record=flip(record, dk_start + 71))
    w.case("other-device-key", "opened with another device key", "errSecDecode", device_key=flip(v.b("device_key"), 0))
    w.case("truncated", "cut inside the third wrapped key", "errSecDecode", record=record[:200])
    w.case("trailing-byte", "one byte after the last wrapped key", "errSecDecode", record=record + b"\x00")
    w.case("version", "version 2, newer than this reader", "errSecNotAvailable", record=b"\x02" + record[1:])
    w.case("passcode-flag", "a passcode flag of 2", "errSecDecode", record=record[:1] + b"\x02" + record[2:])
    w.write()


def backup():
    v = tv.golden("backup-v1.hex")
    f, header = v.b("file"), v.b("header")
    w = Writer("backup.hex", "backup-v1.hex", """
Backup files that must not open (BackupFile.open: file, password).
""")
    w.case("wrong-password", "the password with its last letter changed", "errSecAuthFailed", password="backup passwore")
    w.case("tag-bit", "the payload's tag with one bit flipped", "errSecAuthFailed", file=flip(f, len(f) - 1))
    w.case("header-bit", "one bit of the note flipped: the header is the AAD", "errSecAuthFailed",
           file=flip(f, len(header) - 1))
    w.case("excluded-count", "the count of items left out edited (the AAD again)", "errSecAuthFailed",
           file=f[:47] + struct.pack("<I", 0) + f[51:])
    w.case("truncated", "the last byte cut", "errSecDecode", file=f[:-1])
    w.case("trailing-byte", "one byte after the sealed payload", "errSecDecode", file=f + b"\x00")
    w.case("header-only", "nothing after the note", "errSecDecode", file=header)
    w.case("magic", "not KCBACKUP", "errSecDecode", file=b"KCBACKUQ" + f[8:])
    w.case("version", "format 2, newer than this reader", "errSecUnimplemented", file=f[:8] + b"\x02\x00" + f[10:])
    w.write()


def sync_identity():
    v = tv.golden("sync-identity-v1.hex")
    sealed = v.b("sealed")
    other = tv.Device(bytes(range(0x40, 0x60)), bytes(range(0x60, 0x80)))
    w = Writer("sync-identity.hex", "sync-identity-v1.hex", """
Locally sealed sync identities that must not open (SyncDeviceIdentity(opening: sealed, id: device_id,
classKey: class_key)).
""")
    w.case("tag-bit", "a tag bit flipped", "errSecDecode", sealed=flip(sealed, len(sealed) - 1))
    w.case("other-device", "opened as another device's (the id is the AAD)", "errSecDecode", device_id=other.id)
    w.case("truncated", "cut inside the tag", "errSecDecode", sealed=sealed[:-1])
    # Sealed under the right AAD, but holding another device's secrets.
    swapped = seal(v.b("class_key"), v.b("nonce"), other.sign_seed + other.kx_secret,
                   b"keychaind/v1/sync-identity" + v.b("device_id"))
    w.case("keys-of-another-id", "it opens, but its keys hash to another device id", "errSecDecode", sealed=swapped)
    w.write()


def sync_record():
    v = tv.golden("sync-record-v1.hex")
    body = v.b("body")
    rsk = tv.kdf(v.b("cck"), 1, b"syncseal")
    nonce = v.b("nonce")

    def sealed_record(attributes, pdmn=7, rid=None, padding=None):
        if rid is None:
            rid = tv.record_id(v.b("cck"), "genp", attributes)[1]
        plain = b"\x01\x01" + bytes([pdmn]) + encode_dictionary(attributes)
        plain += padding if padding is not None else b"\x80" + bytes(-(len(plain) + 1) % 256)
        aad = tv.record_aad(v.b("circle_id"), rid, v["epoch"], v["version_mdat"], v.b("writer"), v["counter"], False)
        return rid, seal(rsk, nonce, plain, aad)

    item = tv.sync_item(v)
    w = Writer("sync-record.hex", "sync-record-v1.hex", """
Record rows that must not open (SyncRecordSealer.open: the row's circle_id, record_id, row_epoch (else
epoch), version_mdat, writer, counter, tombstone (else 0) and body, under the circle key cck of epoch).
""")
    w.case("tag-bit", "a tag bit of the body flipped", "errSecDecode", body=flip(body, len(body) - 1))
    w.case("counter", "the row's counter edited (it is in the AAD)", "errSecDecode", counter=8)
    w.case("mdat", "the row's mdat made newer, to win the conflict rule", "errSecDecode", version_mdat=800000002000)
    w.case("writer", "the row's writer edited", "errSecDecode", writer=flip(v.b("writer"), 0))
    w.case("tombstone-flag", "the item's body under a row flagged as a tombstone", "errSecDecode", tombstone=1)
    w.case("moved", "the body moved to another record id", "errSecDecode", record_id=flip(v.b("record_id"), 31))
    w.case("other-epoch", "a row of epoch 2 read with the key of epoch 1", "errSecDecode", row_epoch=2)
    w.case("other-circle", "a row of another circle", "errSecDecode", circle_id=flip(v.b("circle_id"), 15))
    w.case("truncated", "a body shorter than its nonce and tag", "errSecDecode", body=body[:30])
    rid, other_id = sealed_record(item, rid=tv.record_id(v.b("cck"), "genp", dict(item, acct="you"))[1])
    w.case("record-id-of-another-item", "sealed under the AAD of another item's record id: it opens, but its attributes"
           " give another id", "errSecDecode", record_id=rid, body=other_id)
    rid, this_device = sealed_record(dict(item, pdmn="cku"), pdmn=10)
    w.case("this-device-only", "a cku item (a ThisDeviceOnly class) sealed as a record", "errSecDecode", record_id=rid,
           body=this_device)
    rid, unsynced = sealed_record(dict(item, sync=0))
    w.case("not-synchronizable", "an item with sync = 0 sealed as a record", "errSecDecode", record_id=rid, body=unsynced)
    rid, padded = sealed_record(item, padding=b"\x81" + bytes(255 - (3 + len(encode_dictionary(item))) % 256))
    w.case("bad-padding", "padding that starts with 81, not 80", "errSecDecode", record_id=rid, body=padded)
    w.write()


def encode_dictionary(attributes):
    out = struct.pack("<I", len(attributes))
    for key in sorted(attributes):
        value = attributes[key]
        out += struct.pack("<H", len(key)) + key.encode()
        if isinstance(value, str):
            out += b"\x01" + tv.lp(value.encode())
        elif isinstance(value, bytes):
            out += b"\x02" + tv.lp(value)
        elif isinstance(value, float):
            out += b"\x05" + struct.pack("<d", value)
        else:
            out += b"\x03" + struct.pack("<q", value)
    return out


def sync_roster():
    v = tv.golden("sync-roster-v1.hex")
    a, b = tv.devices(v)
    c = tv.Device(bytes(range(0xa0, 0xc0)), bytes(range(0xc0, 0xe0)))
    circle = v.b("circle_id")
    e0, s0, e1, s1 = v.b("entry_0"), v.b("sig_0"), v.b("entry_1"), v.b("sig_1")

    def entry(n, prev, kind, epoch, subject, time, signer):
        return (struct.pack("<I", n) + prev + bytes([kind]) + circle + struct.pack("<I", epoch) + subject.id
                + subject.sign_pk + subject.kx_pk + struct.pack("<q", time) + signer.id)

    def signed(data, by):
        return by.sign(b"keychaind/v1/roster" + data)

    w = Writer("sync-roster.hex", "sync-roster-v1.hex", """
Roster entries, key wraps, heads and join requests that must be refused. A case named roster-* is the
roster entry_0, sig_0, entry_1, sig_1 (and entry_2... when given; SyncRoster(verifying:)); wrap-* the wrap
of the base's cck to b (wrapped, wrap_sig, wrap_epoch else 1, wrapper_id else a's) opened by b against the
base roster; head-* a head (head_device else a's id, head_epoch else 1, head_counter, head_roster_length
else 2, head_roster_hash else the base roster's, head_sig) verified against the base roster; join-* b's
join request (join_name, join_sig), whose signature must not verify ("refused").
Device c (c_sign_seed, c_kx_secret) is no member of the circle.
""")
    w.shared("c_sign_seed", c.sign_seed)
    w.shared("c_kx_secret", c.kx_secret)

    w.case("roster-bad-signature", "entry 1's signature with one bit flipped", "errSecDecode", sig_1=flip(s1, 5))
    unchained = entry(1, bytes(32), tv.ADD, 1, b, v["time_1"], a)
    w.case("roster-not-chained", "entry 1 whose prev is not the hash of entry 0 (signed by a)", "errSecDecode",
           entry_1=unchained, sig_1=signed(unchained, a))
    skipped = struct.pack("<I", 2) + e1[4:]
    w.case("roster-wrong-number", "entry 1 numbered 2 (signed by a)", "errSecDecode", entry_1=skipped,
           sig_1=signed(skipped, a))
    by_c = entry(1, tv.blake2b(e0), tv.ADD, 1, b, v["time_1"], c)
    w.case("roster-add-by-non-member", "b added by c, which is not a member (signed by c)", "errSecDecode",
           entry_1=by_c, sig_1=signed(by_c, c))
    forged = e1[:57] + c.id + e1[73:]
    w.case("roster-subject-not-its-keys", "entry 1's subject id is not the hash of its keys (signed by a)",
           "errSecDecode", entry_1=forged, sig_1=signed(forged, a))
    other = e1[:37] + tv.blake2b(b"other circle", 16) + e1[53:]
    w.case("roster-other-circle", "entry 1 of another circle (signed by a)", "errSecDecode", entry_1=other,
           sig_1=signed(other, a))
    founded_by_b = entry(0, bytes(32), tv.FOUND, 1, a, v["time_0"], b)
    w.case("roster-founding-not-self-signed", "entry 0 naming b as its signer (signed by b)", "errSecDecode",
           entry_0=founded_by_b, sig_0=signed(founded_by_b, b))
    w.case("roster-short-entry", "entry 1 one byte short of 161", "errSecDecode", entry_1=e1[:-1])
    leave = entry(2, tv.blake2b(e1), tv.LEAVE, 1, b, v["time_1"] + 1000, b)
    again = entry(3, tv.blake2b(leave), tv.ADD, 1, b, v["time_1"] + 2000, a)
    w.case("roster-add-after-leave", "b leaves (self-signed), then a adds b again under the same identity",
           "errSecDecode", entry_2=leave, sig_2=signed(leave, b), entry_3=again, sig_3=signed(again, a))
    removal = entry(2, tv.blake2b(e1), tv.REMOVE, 1, b, v["time_1"] + 1000, a)
    w.case("roster-remove-without-rotation", "a removes b without starting epoch 2", "errSecDecode", entry_2=removal,
           sig_2=signed(removal, a))

    wrapped, wrap_sig = v.b("wrapped"), v.b("wrap_sig")

    def wrap_signature(by, epoch, data):
        return by.sign(b"keychaind/v1/sync-wrapped-key" + circle + struct.pack("<I", epoch) + b.id + by.id + data)

    w.case("wrap-bad-signature", "the wrap's signature with one bit flipped", "errSecDecode", wrap_sig=flip(wrap_sig, 0))
    tampered = flip(wrapped, len(wrapped) - 1)
    w.case("wrap-tag-bit", "a tag bit of the wrap flipped, then signed again by a", "errSecDecode", wrapped=tampered,
           wrap_sig=wrap_signature(a, 1, tampered))
    w.case("wrap-other-epoch", "the same wrap claimed for epoch 2 (signed by a)", "errSecDecode", wrap_epoch=2,
           wrap_sig=wrap_signature(a, 2, wrapped))
    key = tv.wrap_key(c.kx_secret, c.kx_pk, b.kx_pk, b.kx_pk, circle, 1)
    by_c = seal(key, v.b("wrap_nonce"), v.b("cck"), circle + struct.pack("<I", 1) + b.id + c.id)
    w.case("wrap-by-non-member", "a wrap to b made and signed by c, which is not a member", "errSecDecode",
           wrapped=by_c, wrap_sig=wrap_signature(c, 1, by_c), wrapper_id=c.id)

    roster_hash = v.b("roster_hash")

    def head_signature(by, counter, length, rh, epoch=1):
        return by.sign(b"keychaind/v1/head" + circle + struct.pack("<I", epoch) + by.id + struct.pack("<q", counter)
                       + struct.pack("<I", length) + rh)

    w.case("head-bad-signature", "the head's signature with one bit flipped", "errSecDecode",
           head_sig=flip(v.b("head_sig"), 63, 0x10))
    w.case("head-counter-raised", "the head's counter raised without a new signature", "errSecDecode", head_counter=8)
    w.case("head-by-non-member", "a head of c, which is not a member (signed by c)", "errSecDecode",
           head_device=c.id, head_sig=head_signature(c, 7, 2, roster_hash))
    fork = tv.blake2b(b"another entry 1")
    w.case("head-fork", "a's head naming another roster of the same length (signed by a)", "errSecDecode",
           head_roster_hash=fork, head_sig=head_signature(a, 7, 2, fork))
    w.case("head-other-epoch", "a's head of epoch 2, which the roster has not reached (signed by a)", "errSecDecode",
           head_epoch=2, head_sig=head_signature(a, 7, 2, roster_hash, epoch=2))

    w.case("join-bad-signature", "the join signature with one bit flipped", "refused", join_sig=flip(v.b("join_sig"), 0))
    w.case("join-other-name", "the request's name changed under the same signature", "refused", join_name="laptop2")
    w.write()


if __name__ == "__main__":
    sealed_item()
    keybag()
    backup()
    sync_identity()
    sync_record()
    sync_roster()
