"""The key ring (the ``encryption_keys`` setting) and the sealed form of one value.

A key ring holds AES-256 keys by version: the highest version seals, every version opens, so a key is rotated by
adding a higher one (new jobs use it) and removing the old one once no job sealed with it is left in Redis.

A sealed value is the text ``kiq-enc:<version>:<base64 of nonce (12 bytes) + ciphertext + GCM tag (16 bytes)>``:
the version says which key opens it, the random nonce is new for every value, and the tag authenticates the
ciphertext together with what the value is bound to (its job class and field, ``associated``), so a sealed value
changed, truncated or moved to another job's field fails to open instead of giving a wrong value.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "kiq-enc:"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
MAX_VERSION = 2**31 - 1
_SEALED = re.compile(r"kiq-enc:([0-9]{1,10}):([A-Za-z0-9+/]+={0,2})\Z")
_URL_SAFE = str.maketrans("-_", "+/")
NEW_KEY_HINT = 'make a key with: python -c "import base64, os; print(base64.b64encode(os.urandom(32)).decode())"'


class DecryptionError(Exception):
    """A job's encrypted argument cannot be opened: the job fails into the retry set with this message (it names the
    field and the key version, never the data) and does not run."""


DecryptionError.__module__ = "kiq.plugins.encryption"  # its recorded error_class: where users import it from


class KeyRing:
    """AES-256-GCM keys by version (``encryption_keys``); ``current`` is the highest, the one that seals."""

    __slots__ = ("_ciphers", "current")

    def __init__(self, keys: Mapping[int, bytes]) -> None:
        if not keys:
            raise ValueError(f'encryption_keys has no key: give at least one, e.g. {{"1": "<base64>"}}; {NEW_KEY_HINT}')
        self._ciphers = {version: AESGCM(key) for version, key in keys.items()}
        self.current = max(keys)

    @property
    def versions(self) -> list[int]:
        return sorted(self._ciphers)

    def __str__(self) -> str:  # what `kiq settings` shows: never a key
        versions = ", ".join(map(str, self.versions))
        return f"keys of versions {versions} (version {self.current} encrypts; the keys are not shown)"

    __repr__ = __str__

    def seal(self, plaintext: bytes, associated: bytes) -> str:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.current].encrypt(nonce, plaintext, associated)
        return f"{PREFIX}{self.current}:{base64.b64encode(nonce + sealed).decode('ascii')}"

    def open(self, value: object, associated: bytes, where: str) -> bytes:
        """The plaintext of a sealed value, or DecryptionError saying why not (``where`` names the field)."""
        if not isinstance(value, str):
            raise DecryptionError(
                f"{where} is of type {type(value).__name__}, not an encrypted value: pushed without the encryption "
                "plugin, or by another producer? (its value is not shown)"
            )
        match = _SEALED.match(value)
        if match is None:
            shape = "a kiq-enc: value of a wrong form" if value.startswith(PREFIX) else "not an encrypted value"
            raise DecryptionError(
                f"{where} is {shape} ({len(value)} characters): pushed without the encryption plugin, by another "
                "producer, or changed in Redis? (its value is not shown)"
            )
        version = int(match.group(1))
        cipher = self._ciphers.get(version)
        if cipher is None:
            known = ", ".join(map(str, self.versions))
            raise DecryptionError(
                f"{where} was encrypted with key version {version}, which this process's encryption_keys lack "
                f"(versions {known}): add that key to KIQ_ENCRYPTION_KEYS and the job runs at its next retry"
            )
        try:
            raw = base64.b64decode(match.group(2), validate=True)
        except (binascii.Error, ValueError):
            raise DecryptionError(f"{where} (key version {version}) is not valid base64") from None
        if len(raw) < NONCE_BYTES + TAG_BYTES:
            raise DecryptionError(
                f"{where} (key version {version}) is truncated: {len(raw)} bytes, fewer than a nonce and a tag"
            )
        try:
            return cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated)
        except InvalidTag:
            raise DecryptionError(
                f"{where} failed authentication with key version {version}: it was changed or moved from another "
                "job or field, or that version's key is not the one that encrypted it"
            ) from None


def is_sealed(value: object) -> bool:
    """Whether ``value`` has the form of a sealed value (a due scheduled job or a retry pushed again: sealed once)."""
    return isinstance(value, str) and value.startswith(PREFIX) and _SEALED.match(value) is not None


def parse_key_ring(raw: Any) -> KeyRing | None:
    """The ``encryption_keys`` setting: a JSON object (text, from ``KIQ_ENCRYPTION_KEYS``) or a table of key
    version (a whole number >= 1) to the base64 of 32 random bytes; unset (None, empty) is None. The errors name the
    version and what is wrong, never a key."""
    if raw is None or isinstance(raw, KeyRing):
        return raw
    if isinstance(raw, str):
        if not raw.strip():
            return None
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ValueError(
                'expected a JSON object of key version to base64 key, e.g. {"1": "<base64 of 32 bytes>"}, and the '
                "text is not JSON (it is not shown)"
            ) from None
    if not isinstance(raw, Mapping):
        raise ValueError(
            f'expected an object of key version to base64 key, e.g. {{"1": "<base64 of 32 bytes>"}}, got a '
            f"{type(raw).__name__}"
        )
    keys: dict[int, bytes] = {}
    for name, encoded in raw.items():
        version = _version(name)
        if version in keys:
            raise ValueError(f"key version {version} is given twice")
        keys[version] = _key(version, encoded)
    return KeyRing(keys)


def _version(name: object) -> int:
    text = str(name).strip() if isinstance(name, (str, int)) and not isinstance(name, bool) else None
    if text is None or not text.isdecimal() or not 1 <= int(text) <= MAX_VERSION:
        shown = repr(name)[:40] if isinstance(name, (str, int)) else type(name).__name__
        raise ValueError(f"a key version must be a whole number from 1 to {MAX_VERSION}, got {shown}")
    return int(text)


def _key(version: int, encoded: object) -> bytes:
    if not isinstance(encoded, str):
        raise ValueError(f"the key of version {version} must be base64 text, got a {type(encoded).__name__}")
    try:  # the standard alphabet or the URL-safe one
        key = base64.b64decode(encoded.strip().translate(_URL_SAFE), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the key of version {version} is not base64 (it is not shown); {NEW_KEY_HINT}") from None
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"the key of version {version} decodes to {len(key)} bytes, not {KEY_BYTES} (AES-256); {NEW_KEY_HINT}"
        )
    return key
