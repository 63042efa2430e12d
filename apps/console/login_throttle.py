"""The one sign-in throttle of the host: staff (the admin's /admin/login/) and console users.

Failures are counted per username + client address in the cache. After
OPENWOP_CONSOLE_LOGIN_FAILURES failures within OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS of the first
one, that username from that address is refused (429) without checking the password until the
window ends; a successful sign-in clears the count. Per pair, so a guesser spraying one account
from many addresses, or many accounts from one, is slowed per pair without locking the account's
owner out from their own address. The count is shared by both doors: the console checks a staff
password before refusing the account, so a second door must not mean more guesses.

The username is keyed as authenticate() receives it (the form's UsernameField: stripped, NFKC),
then casefolded, so " probe_t", "probe_t\\t" and its full-width form are one username. An IPv6
address counts as its /64, the block one subscriber usually holds.

Each refusal is counted in /metrics (`openwop_sign_ins_total`, by door and outcome, no username or
address); the first refusal of each window is audited (`SignInRefusal`, append-only).

The cache is the host's default one (Redis when REDIS_URL is set, so every web process shares the
count; local memory otherwise), the same choice as apps/core/rate_limits.py. The bucket is an HMAC
of the pair, never the username itself. Like the other limits it fails open: an unreachable cache
lets the sign-in be checked normally (the password still has to be right).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
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
THROTTLED = "throttled"  # the refusal's ValidationError code


def _limits() -> tuple[int, int]:
    failures = settings.OPENWOP_CONSOLE_LOGIN_FAILURES
    window = max(1, settings.OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS)
    return failures, window


def client_address(request: HttpRequest | None) -> str:
    """The socket's peer address (never a forwarded header); IPv6 as its /64, mapped IPv4 as IPv4."""
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
        pair = f"{self.username.casefold()}|{self.address}"
        return "openwop:console-login:" + salted_hmac(_SALT, pair).hexdigest()[:32]


def sign_in_refused_for(attempt: SignInAttempt) -> int | None:
    """None: go on and check the password; an int: refused, retry after at most that many seconds."""
    failures, window = _limits()
    if failures <= 0:
        return None
    try:
        count = int(cache.get(attempt.key, 0))
    except Exception as exc:  # fail open (module docstring)
        logger.warning("sign-in throttle not enforced: the cache is unreachable (%s)", type(exc).__name__)
        return None
    if count < failures:
        return None
    sign_in_observed(attempt.door, THROTTLED)
    try:  # one audit row per pair and window: a guesser cannot grow the table per request
        first = cache.add(attempt.key + ":audited", 1, timeout=window)
    except Exception:
        first = True
    if first:
        sign_in_refusal_record(door=attempt.door, username=attempt.username, address=attempt.address)
    return window


def sign_in_failed(attempt: SignInAttempt) -> None:
    """Count one failure; the window starts at the first and is not extended by later ones."""
    sign_in_observed(attempt.door, "failed")
    try:
        cache.add(attempt.key, 0, timeout=_limits()[1])
        cache.incr(attempt.key)
    except Exception as exc:  # an expired key between add and incr, or the cache down
        if not isinstance(exc, ValueError):
            logger.warning("sign-in failure not counted: the cache is unreachable (%s)", type(exc).__name__)


def sign_in_succeeded(attempt: SignInAttempt) -> None:
    sign_in_observed(attempt.door, "ok")
    with contextlib.suppress(Exception):  # the cache down: nothing to clear
        cache.delete(attempt.key)


def _refusal_message(retry_after: int) -> str:
    minutes = max(1, -(-retry_after // 60))
    return (
        "Too many failed sign-ins for this username from your address. "
        f"Try again in {minutes} minute{'s' if minutes != 1 else ''}."
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
        self.retry_after = sign_in_refused_for(attempt)
        if self.retry_after is not None:
            raise forms.ValidationError(_refusal_message(self.retry_after), code=THROTTLED)
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
