"""Sealing push credentials and webhook secrets at rest (interop.md §A2A push delivery).

The key is derived from SECRET_KEY with a purpose label, so it is not the signing key itself and
rotating SECRET_KEY makes old tokens unreadable rather than misread.
"""

from __future__ import annotations

import base64
import functools
import hashlib

from cryptography.fernet import Fernet
from django.conf import settings

_PURPOSE = b"openwop.push.credentials.v1"


@functools.lru_cache(maxsize=4)
def _fernet(secret_key: str) -> Fernet:
    digest = hashlib.blake2b(secret_key.encode(), key=_PURPOSE, digest_size=32).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def credential_seal(plaintext: str) -> bytes:
    return _fernet(settings.SECRET_KEY).encrypt(plaintext.encode())


def credential_open(sealed: bytes | memoryview) -> str:
    return _fernet(settings.SECRET_KEY).decrypt(bytes(sealed)).decode()
