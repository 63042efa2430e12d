"""The one sign-in throttle of the host: staff (the admin's /admin/login/) and console users.

Two budgets, both checked before the password:

- **Per username and address.** Failures are counted per username + client address in the cache.
  After OPENWOP_CONSOLE_LOGIN_FAILURES failures within OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS of the
  first one, that username from that address is refused (429) without checking the password until
  the window ends; a successful sign-in clears the count.
- **Per username, from every address together.** Failures of one username are also counted across
  all addresses, until a day (or two windows, if longer) passes without one. Past
  OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES, the username's password is checked at most once per
  delay: the attempt that finds no delay running takes the turn (an atomic cache add, so parallel
  guesses cannot share it) and starts the next delay, OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS
  doubled per failure beyond the limit and capped at the window; every other attempt is refused
  (429) until it ends. A guesser spreading over many addresses (an IPv6 /48 holds 65,536 /64s) thus
  gets one guess per delay for the whole account, not one budget per address.

The account's owner is never locked out for good: the delay is capped (at most one window to
wait), a sign-in from an address the username signed in from within
OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS is not delayed at all (only the per-address budget
applies there), and a success from anywhere clears both counts. The count is shared by both doors:
the console checks a staff password before refusing the account, so a second door must not mean
more guesses.

The username is keyed as authenticate() receives it (the form's UsernameField: stripped, NFKC),
then casefolded, so " probe_t", "probe_t\\t" and its full-width form are one username. An IPv6
address counts as its /64, the block one subscriber usually holds. The address is the connection's
peer as the ASGI server reports it: uvicorn rewrites it from X-Forwarded-For only for the proxies
it was told to trust (docs/operators/proxies-and-balancers.md), never from the client's own header.

Each refusal is counted in /metrics (`openwop_sign_ins_total`, by door and outcome: `throttled` for
the per-address budget, `delayed` for the per-username one; no username or address); the first
refusal of each window is audited (`SignInRefusal`, append-only), once per username + address for
the first budget and once per username for the second.

The cache is the host's default one (Redis when REDIS_URL is set, so every web process shares the
count; local memory otherwise), the same choice as apps/core/rate_limits.py. The buckets are HMACs
of the username (and address), never the username itself. Like the other limits it fails open: an
unreachable cache lets the sign-in be checked normally (the password still has to be right).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.http import HttpRequest, HttpResponseBase
from django.utils.crypto import salted_hmac

from apps.console.services import sign_in_refusal_record
from apps.core.metrics import sign_in_observed

logger = logging.getLogger(__name__)

_SALT = "openwop-host.console-login"
THROTTLED = "throttled"  # the refusal's ValidationError code; the per-address refusal's metric outcome
DELAYED = "delayed"  # the per-username refusal's metric outcome


def _limits() -> tuple[int, int]:
    failures = settings.OPENWOP_CONSOLE_LOGIN_FAILURES
    window = max(1, settings.OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS)
    return failures, window


def _username_memory_seconds() -> int:
    """How long a username's failures are remembered after the last one: past the longest delay."""
    return max(86_400, 2 * _limits()[1])


def username_delay_seconds(failures: int) -> int:
    """The turn taken once a username has `failures` failures (at least the limit): the first delay
    doubled per failure beyond the limit, capped at the window (and never below the first delay)."""
    limit = settings.OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES
    first = max(1, settings.OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS)
    cap = max(first, _limits()[1])
    return min(cap, first * 2 ** min(max(0, failures - limit), 32))


def client_address(request: HttpRequest | None) -> str:
    """The peer address as the ASGI server reports it (rewritten from X-Forwarded-For only for a
    proxy it trusts, never from a client's own header); IPv6 as its /64, mapped IPv4 as IPv4."""
    raw = (request.META.get("REMOTE_ADDR", "") if request is not None else "") or ""
    try:
        address = ipaddress.ip_address(raw.split("%", 1)[0])
    except ValueError:
        return raw[:64]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


@dataclass(frozen=True)
class SignInAttempt:
    door: str  # "admin" or "console": metrics label and audit column, not part of the key
    username: str  # as authenticate() receives it
    address: str

    @property
    def key(self) -> str:
        """The per-address count (and, with suffixes, its audit mark and the known-address mark)."""
        pair = f"{self.username.casefold()}|{self.address}"
        return "openwop:console-login:" + salted_hmac(_SALT, pair).hexdigest()[:32]

    @property
    def known_key(self) -> str:
        """Set when this username signed in from this address: its sign-ins are not delayed."""
        return self.key + ":known"

    @property
    def username_key(self) -> str:
        """The username's count from every address (and, with suffixes, its turn and audit mark)."""
        return "openwop:console-login:user:" + salted_hmac(_SALT, self.username.casefold()).hexdigest()[:32]

    @property
    def turn_key(self) -> str:
        """Present while a delay runs: its value is when the delay ends (epoch seconds)."""
        return self.username_key + ":turn"


@dataclass(frozen=True)
class Refusal:
    retry_after: int  # seconds, at most
    per_address: bool  # the per-username + address budget (else the username's, from every address)


def sign_in_refused_for(attempt: SignInAttempt) -> Refusal | None:
    """None: go on and check the password; a Refusal: refused, retry after at most that long."""
    failures, window = _limits()
    try:
        count = int(cache.get(attempt.key, 0)) if failures > 0 else 0
    except Exception as exc:  # fail open (module docstring)
        logger.warning("sign-in throttle not enforced: the cache is unreachable (%s)", type(exc).__name__)
        return None
    if failures > 0 and count >= failures:
        sign_in_observed(attempt.door, THROTTLED)
        _audit_once(attempt, attempt.key + ":audited", window)
        return Refusal(retry_after=window, per_address=True)
    try:
        delayed = _username_turn_refused(attempt)
    except Exception as exc:
        logger.warning("sign-in delay not enforced: the cache is unreachable (%s)", type(exc).__name__)
        return None
    if delayed is None:
        return None
    sign_in_observed(attempt.door, DELAYED)
    _audit_once(attempt, attempt.username_key + ":audited", window)
    return Refusal(retry_after=delayed, per_address=False)


def _username_turn_refused(attempt: SignInAttempt) -> int | None:
    """Seconds until the username's next turn, or None when this attempt may check the password
    (below the limit, from a known address, or it took the turn)."""
    limit = settings.OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES
    if limit <= 0:
        return None
    failures = int(cache.get(attempt.username_key, 0))
    if failures < limit:
        return None
    if settings.OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS > 0 and cache.get(attempt.known_key):
        return None
    delay = username_delay_seconds(failures)
    if cache.add(attempt.turn_key, time.time() + delay, timeout=delay):
        return None  # this attempt's turn; the next one waits `delay`
    ends = cache.get(attempt.turn_key)
    return max(1, math.ceil(float(ends) - time.time())) if ends is not None else 1


def _audit_once(attempt: SignInAttempt, mark: str, window: int) -> None:
    """One audit row per mark and window: a guesser cannot grow the table per request."""
    try:
        first = cache.add(mark, 1, timeout=window)
    except Exception:
        first = True
    if first:
        sign_in_refusal_record(door=attempt.door, username=attempt.username, address=attempt.address)


def sign_in_failed(attempt: SignInAttempt) -> None:
    """Count one failure for the address and for the username. The address's window starts at the
    first failure and is not extended by later ones; the username's count lives until a day passes
    without a failure."""
    sign_in_observed(attempt.door, "failed")
    try:
        cache.add(attempt.key, 0, timeout=_limits()[1])
        cache.incr(attempt.key)
    except Exception as exc:  # an expired key between add and incr, or the cache down
        if not isinstance(exc, ValueError):
            logger.warning("sign-in failure not counted: the cache is unreachable (%s)", type(exc).__name__)
    if settings.OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES <= 0:
        return
    memory = _username_memory_seconds()
    try:
        cache.add(attempt.username_key, 0, timeout=memory)
        cache.incr(attempt.username_key)
        cache.touch(attempt.username_key, memory)
    except Exception as exc:
        if not isinstance(exc, ValueError):
            logger.warning("sign-in failure not counted: the cache is unreachable (%s)", type(exc).__name__)


def sign_in_succeeded(attempt: SignInAttempt) -> None:
    """Clear both counts and any delay, and remember the address as one this username signs in from."""
    sign_in_observed(attempt.door, "ok")
    with contextlib.suppress(Exception):  # the cache down: nothing to clear
        cache.delete_many([attempt.key, attempt.username_key, attempt.turn_key])
        days = settings.OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS
        if days > 0:
            cache.set(attempt.known_key, 1, timeout=days * 86_400)


def _refusal_message(refusal: Refusal) -> str:
    minutes = max(1, -(-refusal.retry_after // 60))
    wait = f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    if refusal.per_address:
        return f"Too many failed sign-ins for this username from your address. {wait}"
    return (
        f"Too many failed sign-ins for this username from several addresses. {wait} "
        "(An address you signed in from before is not delayed.)"
    )


class ThrottledAuthenticationFormMixin:
    """Mix in before an AuthenticationForm: the throttle is checked before the password, so every
    view using the form (the admin's login, the console's) is throttled the same way."""

    sign_in_door: ClassVar[str]
    retry_after: int | None = None

    def clean(self) -> dict[str, Any]:
        form: Any = self
        username = form.cleaned_data.get("username")  # the UsernameField's own normalization
        if username is None:  # the field refused it: no password is checked either
            return super().clean()  # type: ignore[misc]
        attempt = SignInAttempt(door=self.sign_in_door, username=username, address=client_address(form.request))
        refusal = sign_in_refused_for(attempt)
        if refusal is not None:
            self.retry_after = refusal.retry_after
            raise forms.ValidationError(_refusal_message(refusal), code=THROTTLED)
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            sign_in_failed(attempt)
            raise
        sign_in_succeeded(attempt)
        return cleaned


class StaffAuthenticationForm(ThrottledAuthenticationFormMixin, AdminAuthenticationForm):
    """The admin's sign-in form (AdminSite.login_form): staff accounts only, throttled."""

    sign_in_door = "admin"


def sign_in_answer(response: HttpResponseBase) -> HttpResponseBase:
    """A login view's answer: 429 with Retry-After when its form was refused by the throttle."""
    form = (getattr(response, "context_data", None) or {}).get("form")
    retry_after = getattr(form, "retry_after", None)
    if isinstance(form, AuthenticationForm) and retry_after is not None:
        response.status_code = 429
        response["Retry-After"] = str(retry_after)
    return response


def staff_sign_in(request: HttpRequest) -> HttpResponseBase:
    """/admin/login/: the admin's own login view (its StaffAuthenticationForm set as the site's
    login_form in openwop_host/urls.py), answering 429 when throttled like the console."""
    return sign_in_answer(admin.site.login(request))
