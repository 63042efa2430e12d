"""Staff (/admin/login/) and console sign-ins share one throttle keyed on the username as Django
authenticates it (stripped, NFKC, casefolded) and the client address (issue 33 items 1 and 2):
whitespace and full-width variants of one username are one count, the right password after the
limit is refused (429, not signed in), the refusal is audited once per window and counted in
/metrics without the username. Across addresses one username's guesses share one budget: past
it, one password check per turn. Browser-like form posts (CSRF token, Origin) to the
live host, with its configured limits (5 failures per username and address per 15 minutes, 10 per
username from every address, then turns from 60 s), some from several 127.77.0.x addresses."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from apps.console.models import SignInRefusal
from tests.browser.roles import PASSWORD, tenant_user
from tests.form_posts import browser_client, form_post

LIMIT = 5  # OPENWOP_CONSOLE_LOGIN_FAILURES's default, which the live host runs with


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _variants(username: str) -> list[str]:
    """What the probe sent: each was a fresh count of LIMIT guesses before the fix."""
    return [username, f"{username} ", f" {username}", f"\t{username}", _full_width(username[0]) + username[1:]]


def _staff(name: str) -> str:
    User.objects.create_user(name, password=PASSWORD, is_staff=True, is_superuser=True)
    return name


def _console(name: str) -> str:
    return tenant_user(slug=f"t-{name}", username=name).username


DOORS: dict[str, tuple[str, str, Callable[[str], str], str]] = {
    # door: login page, where a success goes, account maker, a page only a signed-in user gets
    "admin": ("/admin/login/", "/admin/", _staff, "/admin/"),
    "console": ("/console/login/", "/console/", _console, "/console/keys/"),
}


def _sign_in(
    live_url: str, door: str, username: str, password: str, *, source: str | None = None
) -> tuple[httpx.Response, httpx.Client]:
    """A browser-like sign-in; `source`: the client's own loopback address (all of 127/8 is lo's)."""
    client = browser_client(live_url, local_address=source)
    return form_post(client, DOORS[door][0], {"username": username, "password": password}), client


def _throttled_count(live_url: str, door: str, outcome: str = "throttled") -> float:
    text = httpx.get(f"{live_url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "openwop_sign_ins_total" and sample.labels == {"door": door, "outcome": outcome}:
                return sample.value
    return 0.0


@pytest.mark.parametrize("door", sorted(DOORS))
def test_username_variants_share_one_count_and_the_right_password_is_refused(live_url: str, door: str) -> None:
    _, signed_in_to, make_account, private_page = DOORS[door]
    username = make_account(f"probe_{uuid.uuid4().hex[:10]}")  # fresh: the cache outlives the database
    before = _throttled_count(live_url, door)
    for variant in _variants(username):
        failed, _ = _sign_in(live_url, door, variant, "wrong-password")
        assert failed.status_code == 200, (variant, failed.status_code)  # the form again, with its error
    refusals = 0
    for variant in [*_variants(username), _full_width(username), username.upper()]:
        refused, client = _sign_in(live_url, door, variant, PASSWORD)
        refusals += 1
        assert refused.status_code == 429, (variant, refused.status_code)
        assert refused.headers["Retry-After"] == "900"
        assert "Too many failed sign-ins for this username from your address. Try again in 15 minutes." in refused.text
        assert "sessionid" not in refused.cookies
        gate = client.get(private_page)
        assert gate.status_code == 302 and "login" in gate.headers["Location"]  # not signed in

    # Audited once for the window (door, the username as authenticated, the address), never per try.
    rows = list(SignInRefusal.objects.filter(username__iexact=username))
    assert [(r.door, r.username, r.address) for r in rows] == [(door, username, "127.0.0.1")]
    # Counted in /metrics by door and outcome only.
    assert _throttled_count(live_url, door) - before == refusals
    assert username not in httpx.get(f"{live_url}/metrics", timeout=30).text

    # Another account from the same address (another tenant's, for the console) is not affected.
    other = make_account(f"other_{uuid.uuid4().hex[:10]}")
    answer, _ = _sign_in(live_url, door, f" {other}\t", PASSWORD)
    assert answer.status_code == 302 and answer.headers["Location"] == signed_in_to


def test_failures_at_one_door_count_at_the_other(live_url: str) -> None:
    """The console checks any account's password before saying it is not a console account, so a
    staff password guessed there must use up the same count as at the admin."""
    username = _staff(f"staff_{uuid.uuid4().hex[:10]}")
    for variant in _variants(username):
        _sign_in(live_url, "console", variant, "wrong-password")
    refused, _ = _sign_in(live_url, "admin", username, PASSWORD)
    assert refused.status_code == 429


USERNAME_LIMIT = 10  # OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES's default
FIRST_DELAY = 60  # OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS's default


@pytest.mark.parametrize("door", sorted(DOORS))
def test_one_username_guessed_from_many_addresses_waits_its_turn(live_url: str, door: str) -> None:
    """Four guesses from each of several addresses stay under each address's limit; past the
    username's own limit its password is checked once per turn from anywhere, while the address
    its owner signed in from is not delayed."""
    _, signed_in_to, make_account, private_page = DOORS[door]
    username = make_account(f"spread_{uuid.uuid4().hex[:10]}")
    home = "127.77.0.100"
    assert _sign_in(live_url, door, username, PASSWORD, source=home)[0].status_code == 302  # known from now
    guessers = [f"127.77.0.{n}" for n in range(1, 4)]
    for n in range(USERNAME_LIMIT):
        failed, _ = _sign_in(live_url, door, username, "wrong-password", source=guessers[n // (LIMIT - 1)])
        assert failed.status_code == 200, (n, failed.status_code)
    before = _throttled_count(live_url, door, "delayed")
    took_turn, _ = _sign_in(live_url, door, username, "wrong-password", source="127.77.0.4")
    assert took_turn.status_code == 200  # checked: this attempt had the turn
    for source in ["127.77.0.5", "127.77.0.6"]:  # the right password, from addresses never used
        refused, client = _sign_in(live_url, door, username, PASSWORD, source=source)
        assert refused.status_code == 429, (source, refused.status_code)
        assert 1 <= int(refused.headers["Retry-After"]) <= FIRST_DELAY
        assert "Too many failed sign-ins for this username from several addresses." in refused.text
        gate = client.get(private_page)
        assert gate.status_code == 302 and "login" in gate.headers["Location"]  # not signed in
    assert _throttled_count(live_url, door, "delayed") - before == 2
    rows = list(SignInRefusal.objects.filter(username=username).values_list("door", "address"))
    assert rows == [(door, "127.77.0.5")]  # audited once for the delay

    owner, _ = _sign_in(live_url, door, username, PASSWORD, source=home)
    assert owner.status_code == 302 and owner.headers["Location"] == signed_in_to
    # The owner's success cleared the username's count: a new address is not delayed any more.
    assert _sign_in(live_url, door, username, PASSWORD, source="127.77.0.5")[0].status_code == 302
