"""An auditor filters the negotiation trail to refused decisions and downloads the CSV export
(interop.md §The audit event): the file holds exactly the refused records, nothing else."""

from __future__ import annotations

import csv
from typing import Any

import pytest

from apps.facets.negotiation import negotiation_decide
from apps.facets.services import facet_ensure
from apps.tenants.selectors import subject_from_api_key
from tests.browser.conftest import screenshot
from tests.browser.roles import admin_login, auditor
from tests.live import LiveProcess

PAGE = "/host/openwop-host/audit/negotiations"
PEER = "https://peer.example.net"


def test_auditor_filters_refused_and_downloads_the_csv(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest, make_key: Any
) -> None:
    base_url, _ = browser_host
    assert facet_ensure(protocol="a2a").minimum_version == "1.0"  # the default floor: 0.3 is below it
    acme, globex = subject_from_api_key(make_key("acme")), subject_from_api_key(make_key("globex"))
    for subject, requested in ((acme, "1.0"), (acme, "0.3"), (globex, "9.9"), (globex, None), (acme, "0.3")):
        negotiation_decide(protocol="a2a", requested=requested, peer_origin=PEER, subject=subject)

    admin_login(page, base_url, auditor(), PAGE)
    assert page.locator("tr.neg-row").count() == 5
    assert page.locator("#neg-chart-a2a .neg-bar-refused").count() == 1  # one day, one refused bar
    assert page.locator("#neg-chart-a2a .neg-bar-refused").get_attribute("data-count") == "3"

    page.get_by_role("combobox", name="Outcome").select_option("refused")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**outcome=refused**")
    outcomes = page.locator("tr.neg-row").evaluate_all("rows => rows.map(r => r.dataset.outcome)")
    assert outcomes == ["refused"] * 3
    screenshot(page, request, "filtered-refused")

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    download = download_info.value
    assert download.suggested_filename.startswith("negotiations-") and download.suggested_filename.endswith(".csv")
    with open(download.path(), newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3
    assert {row["outcome"] for row in rows} == {"refused"}
    assert sorted((row["tenant"], row["requested"], row["reason"]) for row in rows) == [
        ("acme", "0.3", "below-floor"),
        ("acme", "0.3", "below-floor"),
        ("globex", "9.9", "unsupported"),
    ]
    assert all(row["protocol"] == "a2a" and row["floor"] == "1.0" for row in rows)
