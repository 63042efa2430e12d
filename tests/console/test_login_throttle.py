"""Failed console sign-ins are throttled per username + address: after the limit the form answers
429 with the reason and does not check the password (the right one is refused too), another address
is not affected, a success clears the count, and the window ends. Per username from every address
together: past its limit the password is checked once per turn, an address the username signed in
from is not delayed, and the delay doubles up to the window."""

from __future__ import annotations

import time
import uuid

import pytest
from django.test import Client

from apps.console.login_throttle import username_delay_seconds
from apps.console.models import SignInRefusal
from tests.browser.roles import PASSWORD, tenant_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def account(settings):  # type: ignore[no-untyped-def]
    settings.OPENWOP_CONSOLE_LOGIN_FAILURES = 3
    settings.OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS = 60
    # a fresh username per test: the cache (Redis under CI) outlives the test database
    return tenant_user(username=f"throttle-{uuid.uuid4().hex[:10]}")


def _sign_in(client: Client, username: str, password: str, address: str = "127.0.0.1"):  # type: ignore[no-untyped-def]
    return client.post("/console/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def test_failures_past_the_limit_answer_429_and_skip_the_password(account) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    for _ in range(3):
        response = _sign_in(client, account.username, "wrong-password")
        assert response.status_code == 200 and b"Please enter a correct username" in response.content
    refused = _sign_in(client, account.username, PASSWORD)
    assert refused.status_code == 429
    assert b"Too many failed sign-ins for this username from your address. Try again in 1 minute." in refused.content
    assert refused["Retry-After"] == "60"
    assert client.get("/console/keys/").status_code == 302  # not signed in
    assert _sign_in(Client(), account.username.upper(), PASSWORD).status_code == 429  # usernames fold case
    elsewhere = _sign_in(Client(), account.username, PASSWORD, address="10.9.8.7")
    assert elsewhere.status_code == 302 and elsewhere["Location"] == "/console/"
    other_user = tenant_user(username=f"other-{uuid.uuid4().hex[:10]}")
    assert _sign_in(Client(), other_user.username, PASSWORD).status_code == 302


def test_a_success_clears_the_count(account) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2):
        assert _sign_in(Client(), account.username, "wrong-password").status_code == 200
    assert _sign_in(Client(), account.username, PASSWORD).status_code == 302
    for _ in range(2):
        assert _sign_in(Client(), account.username, "wrong-password").status_code == 200
    assert _sign_in(Client(), account.username, PASSWORD).status_code == 302  # 4 failures, never 3 in a row


def test_the_refusal_ends_with_the_window(account, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS = 4  # room for three password checks on a loaded box
    _sign_in(Client(), account.username, "wrong-password")
    window_start = time.monotonic()  # the window opened while that answer was being made
    for _ in range(2):
        _sign_in(Client(), account.username, "wrong-password")
    assert _sign_in(Client(), account.username, PASSWORD).status_code == 429
    time.sleep(max(0.0, window_start + 4.2 - time.monotonic()))
    assert _sign_in(Client(), account.username, PASSWORD).status_code == 302


def test_an_ipv6_address_counts_as_its_64(account) -> None:  # type: ignore[no-untyped-def]
    """One subscriber holds a whole /64: rotating its last 64 bits is not a fresh count."""
    for suffix in ("1", "2", "3"):
        failed = _sign_in(Client(), account.username, "wrong-password", address=f"2001:db8:1:2::{suffix}")
        assert failed.status_code == 200
    assert _sign_in(Client(), account.username, PASSWORD, address="2001:db8:1:2:ffff::9").status_code == 429
    elsewhere = _sign_in(Client(), account.username, PASSWORD, address="2001:db8:1:3::1")  # another /64
    assert elsewhere.status_code == 302


# ---- the username's budget from every address together -------------------------------------------

UNSEEN = ["10.0.1.1", "10.0.2.1", "10.0.3.1", "10.0.4.1", "10.0.5.1", "10.0.6.1"]


@pytest.fixture
def spread(account, settings):  # type: ignore[no-untyped-def]
    """Three failures per address allowed, five per username from every address, then turns."""
    settings.OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES = 5
    settings.OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS = 60
    settings.OPENWOP_CONSOLE_LOGIN_KNOWN_ADDRESS_DAYS = 30
    return account


def _fail_from(account, addresses: list[str]) -> None:  # type: ignore[no-untyped-def]
    for address in addresses:  # below the per-address limit of each
        assert _sign_in(Client(), account.username, "wrong-password", address=address).status_code == 200


def test_guesses_spread_over_addresses_get_one_password_check_per_turn(spread) -> None:  # type: ignore[no-untyped-def]
    _fail_from(spread, ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"])  # 5: the limit
    took_turn = _sign_in(Client(), spread.username, "wrong-password", address=UNSEEN[0])
    assert took_turn.status_code == 200 and b"Please enter a correct username" in took_turn.content  # checked
    for address in UNSEEN[1:4]:  # every other address waits for the turn, the right password too
        refused = _sign_in(Client(), spread.username, PASSWORD, address=address)
        assert refused.status_code == 429
        assert 1 <= int(refused["Retry-After"]) <= 60
        assert b"Too many failed sign-ins for this username from several addresses." in refused.content
    # The refusal is audited once for the username's delay, with the first refused address.
    rows = list(SignInRefusal.objects.filter(username=spread.username).values_list("door", "address"))
    assert rows == [("console", UNSEEN[1])]


def test_an_address_the_username_signed_in_from_is_not_delayed(spread) -> None:  # type: ignore[no-untyped-def]
    assert _sign_in(Client(), spread.username, PASSWORD, address="10.7.7.7").status_code == 302  # known now
    _fail_from(spread, ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"])
    assert _sign_in(Client(), spread.username, "wrong-password", address=UNSEEN[0]).status_code == 200  # the turn
    assert _sign_in(Client(), spread.username, PASSWORD, address=UNSEEN[1]).status_code == 429
    home = _sign_in(Client(), spread.username, PASSWORD, address="10.7.7.7")
    assert home.status_code == 302 and home["Location"] == "/console/"
    # That success cleared the username's count: an unseen address signs in again.
    assert _sign_in(Client(), spread.username, PASSWORD, address=UNSEEN[1]).status_code == 302


def test_the_turn_ends_and_the_right_password_gets_in(spread, settings) -> None:  # type: ignore[no-untyped-def]
    settings.OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS = 6  # room for a password check on a loaded box
    _fail_from(spread, ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"])
    assert _sign_in(Client(), spread.username, "wrong-password", address=UNSEEN[0]).status_code == 200
    turn_taken = time.monotonic()  # the delay started before that answer was made
    assert _sign_in(Client(), spread.username, PASSWORD, address=UNSEEN[1]).status_code == 429
    time.sleep(max(0.0, turn_taken + 6.2 - time.monotonic()))
    assert _sign_in(Client(), spread.username, PASSWORD, address=UNSEEN[2]).status_code == 302


def test_another_username_is_not_delayed(spread) -> None:  # type: ignore[no-untyped-def]
    _fail_from(spread, ["10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2", "10.0.0.3"])
    _sign_in(Client(), spread.username, "wrong-password", address=UNSEEN[0])
    other = tenant_user(username=f"other-{uuid.uuid4().hex[:10]}")
    assert _sign_in(Client(), other.username, PASSWORD, address=UNSEEN[1]).status_code == 302


def test_the_delay_doubles_per_failure_up_to_the_window(settings) -> None:
    settings.OPENWOP_CONSOLE_LOGIN_USERNAME_FAILURES = 10
    settings.OPENWOP_CONSOLE_LOGIN_USERNAME_DELAY_SECONDS = 60
    settings.OPENWOP_CONSOLE_LOGIN_WINDOW_SECONDS = 900
    assert [username_delay_seconds(n) for n in range(10, 17)] == [60, 120, 240, 480, 900, 900, 900]
    assert username_delay_seconds(10**6) == 900
