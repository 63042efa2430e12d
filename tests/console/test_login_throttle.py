"""Failed console sign-ins are throttled per username + address: after the limit the form answers
429 with the reason and does not check the password (the right one is refused too), another address
is not affected, a success clears the count, and the window ends."""

from __future__ import annotations

import time
import uuid

import pytest
from django.test import Client

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
