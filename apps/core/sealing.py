"""Sealing secrets at rest: push credentials, webhook secrets, peer credentials.

Each caller names a purpose; the Fernet key is derived from SECRET_KEY with that label, so it is
never the signing key itself, one purpose's tokens cannot be opened as another's, and rotating
SECRET_KEY makes old tokens unreadable rather than misread.
"""

from __future__ import annotations

import base64
import functools
import hashlib

from cryptography.fernet import Fernet
from django.conf import settings

PUSH_CREDENTIALS = b"openwop.push.credentials.v1"


@functools.lru_cache(maxsize=16)
def _fernet(secret_key: str, purpose: bytes) -> Fernet:
    digest = hashlib.blake2b(secret_key.encode(), key=purpose, digest_size=32).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(plaintext: str, *, purpose: bytes) -> bytes:
    return _fernet(settings.SECRET_KEY, purpose).encrypt(plaintext.encode())


def unseal(sealed: bytes | memoryview, *, purpose: bytes) -> str:
    return _fernet(settings.SECRET_KEY, purpose).decrypt(bytes(sealed)).decode()
