#!/usr/bin/python3
# The client half of dh-ietf1024-sha256-aes128-cbc-pkcs7, done by python3-secretstorage's own
# code (secretstorage.dhcrypto), for Tests/SecretServiceTests/SessionCryptoTests.swift.
# One command per line on standard input, one answer line each:
#   "new any" | "new short"  -> hex of a fresh client public value, unpadded ("short": one
#                               that has fewer than 128 bytes, as libsecret sends 1 time in 256)
#   "server HEX IV CT"       -> the server's public value, then an IV and ciphertext it made
#                               with its key: answers "PLAINHEX IV2 CT2", the decryption and
#                               the same plaintext encrypted back with this side's key
import sys

from cryptography.hazmat.backends import default_backend
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.padding import PKCS7
import os

from secretstorage.dhcrypto import Session, int_to_bytes

session = None
for line in sys.stdin:
    words = line.split()
    if words[0] == "new":
        while True:
            session = Session()
            public = int_to_bytes(session.my_public_key)
            if words[1] == "any" or len(public) < 128:
                break
        print(public.hex(), flush=True)
    elif words[0] == "server":
        session.set_server_public_key(int.from_bytes(bytes.fromhex(words[1]), "big"))
        key = session.aes_key
        decryptor = Cipher(algorithms.AES(key), modes.CBC(bytes.fromhex(words[2])), default_backend()).decryptor()
        padded = decryptor.update(bytes.fromhex(words[3])) + decryptor.finalize()
        unpadder = PKCS7(128).unpadder()
        plain = unpadder.update(padded) + unpadder.finalize()
        iv = os.urandom(16)
        padder = PKCS7(128).padder()
        encryptor = Cipher(algorithms.AES(key), modes.CBC(iv), default_backend()).encryptor()
        ct = encryptor.update(padder.update(plain) + padder.finalize()) + encryptor.finalize()
        print(plain.hex(), iv.hex(), ct.hex(), flush=True)
