"""Keys that live in keychaind (docs/keys.md): made or imported there, used there, and, unless
made extractable, never handed out. Mirrors the Swift client's KeychainKey.

    from keychaind_client import Connection, Key, KeyType
    c = Connection()
    key = Key.generate(c, KeyType.P256, "tls")
    signature = key.sign(b"message")                    # DER ECDSA over SHA-256
    ciphertext = key.encrypt(b"secret")                 # Apple's ECIES, VariableIV
    assert key.decrypt(ciphertext) == b"secret"

Public keys are bytes: 32 raw bytes for Ed25519 and X25519, the 65-byte uncompressed X9.63
point for P-256. Errors are KeychainError with Apple's OSStatus code (a failed decryption is
Status.PARAM, as on Apple's platforms).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

if TYPE_CHECKING:
    from . import Connection

Bytes = Union[bytes, bytearray, memoryview]


class KeyType(str, enum.Enum):
    """A key type keychaind generates; the value is the name the CLI uses."""
    ED25519 = "ed25519"
    X25519 = "x25519"
    P256 = "p256"

    @property
    def attribute_number(self) -> int:
        """kSecAttrKeyType as the item's `type` attribute holds it."""
        return {"ed25519": 105, "x25519": 106, "p256": 73}[self.value]

    @classmethod
    def from_attribute_number(cls, number: int) -> Optional["KeyType"]:
        for t in cls:
            if t.attribute_number == number:
                return t
        return None


class SigningAlgorithm:
    """Apple's kSecKeyAlgorithm names for signatures (Ed25519's is keychaind's, in Apple's style)."""
    ED25519 = "algid:sign:EdDSA:message-Ed25519"
    ECDSA_MESSAGE_X962_SHA256 = "algid:sign:ECDSA:message-X962:SHA256"
    ECDSA_DIGEST_X962_SHA256 = "algid:sign:ECDSA:digest-X962:SHA256"


class AgreementAlgorithm:
    """Key agreement: the raw shared secret, or through the X9.63 KDF with SHA-256."""
    STANDARD = "algid:keyexchange:ECDH"
    STANDARD_X963_SHA256 = "algid:keyexchange:ECDH:KDFX963:SHA256"


class EncryptionAlgorithm:
    """Apple's ECIES names (P-256 keys) and libsodium's sealed box (X25519 keys)."""
    ECIES_COFACTOR_VARIABLE_IV_X963_SHA256_AESGCM = "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM-KDFIV"
    ECIES_STANDARD_VARIABLE_IV_X963_SHA256_AESGCM = "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM-KDFIV"
    ECIES_COFACTOR_X963_SHA256_AESGCM = "algid:encrypt:ECIES:ECDHC:KDFX963:SHA256:AESGCM"
    ECIES_STANDARD_X963_SHA256_AESGCM = "algid:encrypt:ECIES:ECDH:KDFX963:SHA256:AESGCM"
    SEALED_BOX_X25519 = "algid:encrypt:X25519:SealedBox"


#: The tag that marks a key for `keychain ssh-agent`.
SSH_TAG = b"ssh"

_DEFAULT_SIGNING = {KeyType.ED25519: SigningAlgorithm.ED25519, KeyType.P256: SigningAlgorithm.ECDSA_MESSAGE_X962_SHA256}
_DEFAULT_ENCRYPTION = {KeyType.P256: EncryptionAlgorithm.ECIES_COFACTOR_VARIABLE_IV_X963_SHA256_AESGCM,
                       KeyType.X25519: EncryptionAlgorithm.SEALED_BOX_X25519}


class Key:
    """A private key in keychaind, named by its item's persistent reference. Build one with
    Key.generate, Key.import_private_key or Key.find, not directly."""

    def __init__(self, connection: "Connection", attributes: Dict[str, Any], public_key: bytes) -> None:
        self.connection = connection
        #: Every attribute of the stored item (kcls, klbl, usage flags...).
        self.attributes = attributes
        key_type = KeyType.from_attribute_number(attributes.get("type", -1))
        if key_type is None or not isinstance(attributes.get("v_PersistentRef"), bytes):
            from . import KeychainError, Status
            raise KeychainError(Status.DECODE, "keychaind answered with an item that is not a key it uses")
        self.type: KeyType = key_type
        label = attributes.get("labl", "")
        self.label: str = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
        tag = attributes.get("atag")
        if isinstance(tag, str):
            tag = tag.encode("utf-8")
        self.application_tag: Optional[bytes] = tag or None
        self.public_key: bytes = public_key
        self.persistent_ref: bytes = attributes["v_PersistentRef"]
        self.access_group: str = str(attributes.get("agrp", ""))
        self.extractable: bool = attributes.get("extr") == 1

    def __repr__(self) -> str:
        return "Key(%s, %r, group=%r)" % (self.type.value, self.label, self.access_group)

    # making and finding keys

    @classmethod
    def generate(cls, connection: "Connection", key_type: Union[KeyType, str], label: str,
                 accessible: str = "when-unlocked", access_group: Optional[str] = None,
                 extractable: bool = False, application_tag: Optional[bytes] = None, *,
                 require: Union[str, List[str], None] = None, app_password: Any = None,
                 context: Any = None) -> "Key":
        """A new private key, made inside keychaind and stored there. accessible: a name from
        ACCESSIBLE ("when-unlocked", the default, ...) or a pdmn code. require: the CLI's
        names ("presence", "passcode", "app-password"); with "app-password" the key's bytes
        are sealed under app_password (or the application password of context, an
        AuthenticationContext of connection), which sign, agree and decrypt then need."""
        from .access_control import with_access_control
        item = _key_attributes(KeyType(key_type), label, accessible, access_group, extractable, application_tag)
        if require is not None:
            item = with_access_control(item, None, require)
        return cls._from_item(connection, connection.key_generate(item, app_password=app_password, context=context))

    @classmethod
    def import_private_key(cls, connection: "Connection", private_key: Bytes, key_type: Union[KeyType, str],
                           label: str, accessible: str = "when-unlocked", access_group: Optional[str] = None,
                           extractable: bool = False, application_tag: Optional[bytes] = None) -> "Key":
        """Stores an existing private key: 32 raw bytes for Ed25519 and X25519, for P-256 the
        97-byte X9.63 point followed by the scalar. Status.PARAM when the bytes are not a key."""
        item = _key_attributes(KeyType(key_type), label, accessible, access_group, extractable, application_tag)
        item.update({"class": "keys", "v_Data": bytes(private_key), "r_Attributes": True, "r_PersistentRef": True})
        return cls._from_item(connection, connection.add(item))

    @classmethod
    def find(cls, connection: "Connection", label: Optional[str] = None,
             application_tag: Optional[bytes] = None) -> List["Key"]:
        """The private keys keychaind uses, with this label and tag where given, in the
        caller's groups; empty when there are none."""
        from . import KeychainError, Status
        query: Dict[str, Any] = {"class": "keys", "kcls": 1, "r_Attributes": True, "r_PersistentRef": True,
                                 "m_Limit": "m_LimitAll"}
        if label is not None:
            query["labl"] = label
        if application_tag is not None:
            query["atag"] = bytes(application_tag)
        try:
            items = connection.copy_matching(query)
        except KeychainError as e:
            if e.status == Status.ITEM_NOT_FOUND:
                return []
            raise
        return [cls._from_item(connection, item) for item in items
                if isinstance(item, dict) and KeyType.from_attribute_number(item.get("type", -1)) is not None]

    @classmethod
    def _from_item(cls, connection: "Connection", attributes: Dict[str, Any]) -> "Key":
        ref = attributes.get("v_PersistentRef")
        public_key = connection.key_public({"v_PersistentRef": ref})
        return cls(connection, attributes, public_key)

    # using a key

    @property
    def _reference(self) -> Dict[str, Any]:
        return {"v_PersistentRef": self.persistent_ref}

    def sign(self, data: Bytes, algorithm: Optional[str] = None, *, app_password: Any = None,
             context: Any = None) -> bytes:
        """A signature of data: Ed25519's 64 raw bytes, or P-256's DER X9.62 ECDSA signature
        (over SHA-256 of data by default; SigningAlgorithm.ECDSA_DIGEST_X962_SHA256 signs a
        32-byte digest). Needs the key's sign flag and its class key, and app_password for a
        key sealed under one. context: an AuthenticationContext of the key's connection (an
        authenticated one spares a key that asks first its prompt; one may hold the
        application password instead of app_password)."""
        return self.connection.key_sign(self._reference, {
            "algorithm": algorithm or self._default(_DEFAULT_SIGNING, "sign"), "data": bytes(data)},
            app_password=app_password, context=context)

    def verify(self, signature: Bytes, data: Bytes, algorithm: Optional[str] = None) -> bool:
        """Whether signature is this key's signature of data."""
        return self.connection.key_verify(self._reference, {
            "algorithm": algorithm or self._default(_DEFAULT_SIGNING, "sign"), "data": bytes(data),
            "signature": bytes(signature)})

    def agree(self, peer_public_key: Bytes, algorithm: str = AgreementAlgorithm.STANDARD,
              requested_size: Optional[int] = None, shared_info: Bytes = b"", *, app_password: Any = None,
              context: Any = None) -> bytes:
        """The shared secret with a peer's public key (X25519 or P-256), raw or through the
        X9.63 KDF (requested_size bytes). Needs the key's derive flag and its class key.
        app_password and context: as for sign."""
        parameters: Dict[str, Any] = {"algorithm": algorithm, "peer": bytes(peer_public_key)}
        if requested_size is not None:
            parameters["requestedSize"] = requested_size
        if shared_info:
            parameters["sharedInfo"] = bytes(shared_info)
        return self.connection.key_agree(self._reference, parameters, app_password=app_password, context=context)

    def encrypt(self, plaintext: Bytes, algorithm: Optional[str] = None) -> bytes:
        """plaintext encrypted to this key's public half: Apple's ECIES for P-256 (by default
        the Cofactor VariableIV form SecKeyCreateEncryptedData recommends), a sealed box for
        X25519. Needs no class key: works for a when-unlocked key while the keychain is locked."""
        return self.connection.key_encrypt(self._reference, {
            "algorithm": algorithm or self._default(_DEFAULT_ENCRYPTION, "encrypt"), "data": bytes(plaintext),
            "publicKey": self.public_key})

    def decrypt(self, ciphertext: Bytes, algorithm: Optional[str] = None, *, app_password: Any = None,
                context: Any = None) -> bytes:
        """The plaintext of a ciphertext made for this key. Needs the key's decrypt flag and
        its class key (and app_password for a key sealed under one; context: as for sign); a
        wrong key or an altered ciphertext raises KeychainError(PARAM)."""
        return self.connection.key_decrypt(self._reference, {
            "algorithm": algorithm or self._default(_DEFAULT_ENCRYPTION, "encrypt"), "data": bytes(ciphertext)},
            app_password=app_password, context=context)

    def delete(self) -> None:
        """Deletes the key from the keychain."""
        self.connection.delete(self._reference)

    def _default(self, table: Dict[KeyType, str], what: str) -> str:
        if self.type not in table:
            from . import KeychainError, Status
            raise KeychainError(Status.PARAM, "an %s key does not %s" % (self.type.value, what))
        return table[self.type]


def _key_attributes(key_type: KeyType, label: str, accessible: str, access_group: Optional[str],
                    extractable: bool, application_tag: Optional[bytes]) -> Dict[str, Any]:
    from . import _pdmn
    item: Dict[str, Any] = {"type": key_type.attribute_number, "kcls": 1, "labl": label,
                            "pdmn": _pdmn(accessible), "extr": 1 if extractable else 0}
    if access_group is not None:
        item["agrp"] = access_group
    if application_tag is not None:
        item["atag"] = bytes(application_tag)
    return item
