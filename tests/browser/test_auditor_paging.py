"""An auditor pages through the negotiation trail past the old 1,000-record cap (issue 19): every
record of the filtered tenant shows up exactly once, newest first, the filter is kept on every page,
and the chart counts all of them (from the daily rollup), not just the page shown."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from apps.audit.models import HostEvent
from apps.facets.negotiation import NEGOTIATION_EVENT
from apps.tenants.services import tenant_get_or_create
from tests.browser.conftest import screenshot
from tests.browser.roles import admin_login, auditor
from tests.live import LiveProcess

PAGE = "/host/openwop-host/audit/negotiations"
RECORDS = 1_050
NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def _records(slug: str, count: int) -> None:
    tenant = tenant_get_or_create(slug=slug)[0]
    HostEvent.unscoped_all_tenants.bulk_create(
        HostEvent(
            tenant=tenant,
            subject_id="peer",
            subject={"subjectId": "peer"},
            event_id=f"evt-{slug}-{n:012d}",
            type=NEGOTIATION_EVENT,
            durable=True,
            sequence=n,
            at=NOW - dt.timedelta(seconds=n),
            payload={"protocol": "a2a", "outcome": "accepted", "version": "1.0", "requested": str(n), "reason": "ok"},
        )
        for n in range(1, count + 1)
    )


def test_auditor_pages_past_a_thousand_records_with_the_filter_kept(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, _ = browser_host
    _records("acme", RECORDS)
    _records("globex", 30)  # another tenant's records: never on acme's pages

    admin_login(page, base_url, auditor(), PAGE)
    page.get_by_label("Tenant").fill("acme")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**tenant=acme**")
    bars = page.locator("#neg-chart-a2a [data-count]").evaluate_all("bars => bars.map(b => +b.dataset.count)")
    assert sum(bars) == RECORDS  # the chart covers every record, not the page

    seen: list[str] = []
    pages = 0
    while True:
        pages += 1
        assert "tenant=acme" in page.url
        seen += page.locator("tr.neg-row td:nth-child(5)").all_inner_texts()  # requested = the record's number
        tenants = set(page.locator("tr.neg-row td:nth-child(2)").all_inner_texts())
        assert tenants == {"acme"}
        older = page.locator("#neg-pager a[rel=next]")
        if older.count() == 0:
            break
        if pages == 10:
            screenshot(page, request, "page-10")
        with page.expect_navigation():
            older.click()
    assert pages == 11
    assert seen == [str(n) for n in range(1, RECORDS + 1)]  # newest first, each exactly once
    screenshot(page, request, "last-page")
    page.locator("#neg-pager a[rel=first]").click()
    page.wait_for_url("**tenant=acme**")
    assert page.locator("tr.neg-row td:nth-child(5)").first.inner_text() == "1"
