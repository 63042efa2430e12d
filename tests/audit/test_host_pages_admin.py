"""The host pages inside the admin (issue 53 item 5): they keep the admin's header, user links and
breadcrumbs; negotiation rows link to their record and show its chain digest; and the admin says
"facet refreshes"."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from apps.audit.services import host_event_append
from apps.facets.negotiation import NEGOTIATION_EVENT
from tests.audit.test_deprecation import _world
from tests.browser import roles

pytestmark = pytest.mark.django_db

NEGOTIATIONS = "/host/openwop-host/audit/negotiations"
DEPRECATION = "/host/openwop-host/deprecation/"


@pytest.fixture
def auditor_client(client: Client) -> Client:
    account = roles.auditor()
    assert client.login(username=account.username, password=account.password)
    return client


@pytest.mark.parametrize(
    ("url", "query", "crumb"),
    [
        (NEGOTIATIONS, {}, "Negotiation records"),
        (DEPRECATION, {}, "Version deprecation"),
        (f"{DEPRECATION}version/", {"protocol": "mcp", "requested": "2024-11-05"}, "mcp 2024-11-05"),
    ],
)
def test_host_pages_keep_the_admin_header_and_breadcrumbs(
    auditor_client: Client, url: str, query: dict[str, str], crumb: str
) -> None:
    _world()
    page = auditor_client.get(url, query).content.decode()
    assert 'id="user-tools"' in page and "arno-auditor" in page.split('id="user-tools"')[1][:2000]
    assert 'href="/admin/logout/"' in page or 'action="/admin/logout/"' in page
    breadcrumbs = re.search(r'<div class="breadcrumbs">(.*?)</div>', page, re.S)
    assert breadcrumbs is not None and '<a href="/admin/">Home</a>' in breadcrumbs[1] and crumb in breadcrumbs[1]


def test_negotiation_rows_link_to_their_record_and_its_chain_digest(auditor_client: Client, make_subject: Any) -> None:
    _, alice = make_subject("acme")
    payload = {"protocol": "mcp", "outcome": "accepted", "requested": "2026-07-28", "version": "2026-07-28",
               "reason": "ok", "floor": ""}  # fmt: skip
    event = host_event_append(subject=alice, type=NEGOTIATION_EVENT, payload=payload, durable=True)
    event.refresh_from_db()
    assert len(event.digest) == 64
    page = auditor_client.get(NEGOTIATIONS).content.decode()
    row = page.split('class="neg-row"')[1].split("</tr>")[0]
    record_url = f"/admin/audit/hostevent/{event.pk}/change/"
    assert f'<a href="{record_url}" class="neg-record">host event {event.event_id}</a>' in row
    assert f'<span title="{event.digest}">{event.digest[:16]}…</span>' in row
    record = auditor_client.get(record_url)
    assert record.status_code == 200 and event.digest in record.content.decode()  # the record shows it whole


def test_the_admin_says_facet_refreshes(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", password=roles.PASSWORD))
    index = client.get("/admin/").content.decode()
    assert "Facet refreshes" in index and "Facet refreshs" not in index
