"""Failed console sign-ins, counted per username + client address in the cache.

After OPENWOP_CONSOLE_LOGIN_FAILURES failures within OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS of the
first one, that username from that address is refused (429) without checking the password until
the window ends; a successful sign-in clears the count. Per username + address, so a guesser
spraying one account from many addresses, or many accounts from one, is slowed per pair without
locking the account's owner out from their own address.

The cache is the host's default one (Redis when REDIS_URL is set, so every web process shares the
count; local memory otherwise), the same choice as apps/core/rate_limits.py. The bucket is an HMAC
of the pair, never the username itself. Like the other limits it fails open: an unreachable cache
lets the sign-in be checked normally (the password still has to be right).
"""

from __future__ import annotations

import contextlib
import logging

from django.conf import settings
from django.core.cache import cache
from django.utils.crypto import salted_hmac

logger = logging.getLogger(__name__)

_SALT = "openwop-host.console-login"


def _limits() -> tuple[int, int]:
    failures = settings.OPENWOP_CONSOLE_LOGIN_FAILURES
    window = max(1, settings.OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS)
    return failures, window


def _key(username: str, address: str) -> str:
    return "openwop:console-login:" + salted_hmac(_SALT, f"{username.casefold()}|{address}").hexdigest()[:32]


def login_refused_for(username: str, address: str) -> int | None:
    """None: go on and check the password; an int: refused, retry after at most that many seconds."""
    failures, window = _limits()
    if failures <= 0:
        return None
    try:
        count = int(cache.get(_key(username, address), 0))
    except Exception as exc:  # fail open (module docstring)
        logger.warning("console sign-in throttle not enforced: the cache is unreachable (%s)", type(exc).__name__)
        return None
    return window if count >= failures else None


def login_failed(username: str, address: str) -> None:
    """Count one failure; the window starts at the first and is not extended by later ones."""
    key = _key(username, address)
    try:
        cache.add(key, 0, timeout=_limits()[1])
        cache.incr(key)
    except Exception as exc:  # an expired key between add and incr, or the cache down
        if not isinstance(exc, ValueError):
            logger.warning("console sign-in failure not counted: the cache is unreachable (%s)", type(exc).__name__)


def login_succeeded(username: str, address: str) -> None:
    with contextlib.suppress(Exception):  # the cache down: nothing to clear
        cache.delete(_key(username, address))
