"""An auditor reads the deprecation view on seeded records (issue 24 item 3): the table per
protocol and requested version, the drill-down to tenants and peers, "what if" a floor moved
(submitted from the keyboard), and both CSV exports."""

from __future__ import annotations

import csv
from typing import Any

import pytest

from tests.audit.test_deprecation import P1, _world
from tests.browser.conftest import screenshot
from tests.browser.roles import admin_login, auditor
from tests.live import LiveProcess

PAGE = "/host/openwop-host/deprecation/"


def _cells(row: Any) -> dict[str, str]:
    return dict(row.locator("td[data-col]").evaluate_all("cells => cells.map(c => [c.dataset.col, c.textContent])"))


def test_auditor_reads_the_table_drills_down_and_asks_what_if(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, _ = browser_host
    _world()  # two tenants, mcp and a2a records, three peers (see its docstring)

    admin_login(page, base_url, auditor(), PAGE)
    assert page.locator("tr.dep-row").count() == 5
    old = page.locator('tr.dep-row[data-protocol="mcp"][data-requested="2024-11-05"]')
    assert _cells(old) == {"exchanges": "5", "accepted": "4", "refused": "1", "tenants": "2", "peers": "1"}
    screenshot(page, request, "table")

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    with open(download_info.value.path(), newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["protocol"], r["requested"], r["exchanges"]) for r in rows] == [
        ("a2a", "1.0", "1"),
        ("a2a", "0.3", "2"),
        ("mcp", "2025-03-26", "3"),
        ("mcp", "2024-11-05", "5"),
        ("mcp", "", "2"),
    ]

    page.get_by_role("link", name="Tenants and peers of mcp 2024-11-05").click()
    page.wait_for_url("**/deprecation/version/?**requested=2024-11-05**")
    tenants = page.locator("tr.dep-tenant").evaluate_all("rows => rows.map(r => r.dataset.tenant)")
    assert tenants == ["acme", "globex"]
    assert page.locator("tr.dep-peer").evaluate_all("rows => rows.map(r => r.dataset.peer)") == [P1]
    assert _cells(page.locator("tr.dep-peer")) == {"tenants": "2", "exchanges": "4", "accepted": "3"}
    screenshot(page, request, "drill-down")
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export peers CSV").click()
    with open(download_info.value.path(), newline="") as handle:
        assert [(r["peerDigest"], r["exchanges"]) for r in csv.DictReader(handle)] == [(P1, "4")]

    page.get_by_role("link", name="Back to all versions").click()
    page.wait_for_url(f"{base_url}{PAGE}?**")
    page.get_by_label("Protocol of the floor").select_option("mcp")
    floor = page.get_by_role("textbox", name="Floor")
    floor.fill("2025-06-18")
    floor.press("Enter")  # the keyboard submits the form
    page.wait_for_url("**floor=2025-06-18**")
    result = page.get_by_role("status")
    numbers = result.locator("dd[data-whatif]").evaluate_all("dds => dds.map(d => [d.dataset.whatif, d.textContent])")
    assert dict(numbers) == {"exchanges": "8", "accepted": "7", "tenants": "2", "peers": "2"}
    assert "2024-11-05, 2025-03-26" in result.inner_text()
    screenshot(page, request, "what-if")

    page.get_by_role("textbox", name="Floor").fill("1.0")
    page.get_by_role("button", name="What if").click()
    page.wait_for_url("**floor=1.0**")
    assert "is not an MCP version" in page.get_by_role("alert").inner_text()
    assert page.locator("#whatif-result").count() == 0
