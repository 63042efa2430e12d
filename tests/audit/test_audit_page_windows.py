"""The auditors' screens take the window they are given (issue 32 item 10): the deprecation page's
"what if" counts over the chosen window, and the negotiation page says why reversed dates match
nothing instead of showing an empty page."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.test import Client

from apps.audit.deprecation import Window, what_if
from tests.audit.test_deprecation import TODAY, URL, _world
from tests.browser import roles

NEGOTIATIONS = "/host/openwop-host/audit/negotiations"

pytestmark = pytest.mark.django_db


@pytest.fixture
def auditor_client(client: Client) -> Client:
    account = roles.auditor()
    assert client.login(username=account.username, password=account.password)
    return client


def _whatif_numbers(page: str) -> dict[str, str]:
    return dict(re.findall(r'data-whatif="(\w+)">(\d+)<', page))


def test_what_if_counts_over_the_chosen_window(auditor_client: Client) -> None:
    _world()  # mcp 2024-11-05: five exchanges in the last 30 days, one more (P2, refused) 40 days ago
    query = {"whatif_protocol": "mcp", "floor": "2025-03-26"}
    assert _whatif_numbers(auditor_client.get(URL, query).content.decode()) == {
        "exchanges": "5",
        "accepted": "4",
        "tenants": "2",
        "peers": "1",
    }
    since = (TODAY - dt.timedelta(days=45)).isoformat()
    wide = auditor_client.get(URL, {**query, "since": since}).content.decode()
    assert _whatif_numbers(wide) == {"exchanges": "6", "accepted": "4", "tenants": "2", "peers": "2"}
    assert f"from {since} to {TODAY.isoformat()}" in wide
    narrow = {"since": (TODAY - dt.timedelta(days=1)).isoformat(), "until": TODAY.isoformat()}
    assert _whatif_numbers(auditor_client.get(URL, {**query, **narrow}).content.decode())["exchanges"] == "0"
    window = Window(since=TODAY - dt.timedelta(days=45), until=TODAY)
    assert what_if(protocol="mcp", floor="2025-03-26", window=window).exchanges == 6


def test_a_floor_outside_the_grammar_is_named_with_the_protocol_as_it_is_spelled(auditor_client: Client) -> None:
    body = auditor_client.get(URL, {"whatif_protocol": "a2a", "floor": "2025-03-26"}).content.decode()
    assert "is not an A2A version" in body and "a a2a" not in body


def test_reversed_dates_on_the_negotiation_page_say_why_and_keep_the_other_filters(auditor_client: Client) -> None:
    _world()
    reversed_dates = {"since": TODAY.isoformat(), "until": (TODAY - dt.timedelta(days=5)).isoformat()}
    response = auditor_client.get(NEGOTIATIONS, reversed_dates)
    assert response.status_code == 200
    page = response.content.decode()
    assert "must not be after" in page and "The other filters apply." in page
    assert page.count('class="neg-row"') == len(
        re.findall("neg-row", auditor_client.get(NEGOTIATIONS).content.decode())
    )
    # The range alone is ignored (issue 53): the protocol filter beside it still applies.
    only_a2a = auditor_client.get(NEGOTIATIONS, {**reversed_dates, "protocol": "a2a"}).content.decode()
    assert "Ignored the date range (&#x27;since&#x27; " in only_a2a
    rows = re.findall(r'<tr class="neg-row"[^>]*><td>[^<]*</td><td>[^<]*</td><td>(\w+)</td>', only_a2a)
    assert rows and set(rows) == {"a2a"}
    assert 'value="a2a" selected' in only_a2a  # the form keeps what was asked
    bad_outcome = auditor_client.get(NEGOTIATIONS, {"protocol": "a2a", "outcome": "<nope>"}).content.decode()
    assert "Ignored Outcome (" in bad_outcome and "<nope>" not in bad_outcome
    assert set(re.findall(r'<tr class="neg-row"[^>]*><td>[^<]*</td><td>[^<]*</td><td>(\w+)</td>', bad_outcome)) == {
        "a2a"
    }
