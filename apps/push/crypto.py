"""Sealing push credentials and webhook secrets at rest (interop.md §A2A push delivery), under the
push purpose of apps.core.sealing."""

from __future__ import annotations

from apps.core.sealing import PUSH_CREDENTIALS, seal, unseal


def credential_seal(plaintext: str) -> bytes:
    return seal(plaintext, purpose=PUSH_CREDENTIALS)


def credential_open(sealed: bytes | memoryview) -> str:
    return unseal(sealed, purpose=PUSH_CREDENTIALS)
