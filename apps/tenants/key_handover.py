"""A new API key's raw value crosses one redirect to the page that shows it once: the console's key
list, the admin's page of the new key.

It travels sealed in the session (server-side rows; the cookie holds only the session id), never in
a `messages` cookie, which is signed but not encrypted: whoever saw the browser's cookies (a proxy
log, a shared machine) would have the key. The sealed value is popped when shown, so no readable
copy stays behind and a reload shows nothing.
"""

from __future__ import annotations

from cryptography.fernet import InvalidToken
from django.http import HttpRequest

from apps.core.sealing import seal, unseal
from apps.tenants.services import KEY_SCHEME

_SESSION_KEY = "openwop.new_key"
_PURPOSE = b"openwop.new-key.v1"


def new_key_hold(request: HttpRequest, raw: str) -> None:
    request.session[_SESSION_KEY] = seal(raw, purpose=_PURPOSE).decode()


def new_key_take(request: HttpRequest, *, prefix: str | None = None) -> str | None:
    """The held key, removed from the session; with `prefix`, only when it is that key's (the page
    of another key leaves it for its own page)."""
    sealed = request.session.get(_SESSION_KEY)
    if sealed is None:
        return None
    try:
        raw = unseal(sealed.encode(), purpose=_PURPOSE)
    except InvalidToken:  # sealed under a SECRET_KEY since rotated: it is gone either way
        del request.session[_SESSION_KEY]
        return None
    if prefix is not None and not raw.startswith(f"{KEY_SCHEME}_{prefix}."):
        return None
    del request.session[_SESSION_KEY]
    return raw
