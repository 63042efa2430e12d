"""A newcomer opens `/` (issue 53 item 3): the front door renders, every request the browser makes
is to this host (no CDN, no font service), and its links reach the REST API reference and the
console's sign-in."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.live import LiveProcess


def test_the_front_door_links_the_api_reference_and_the_console(
    browser_host: tuple[str, LiveProcess], page: Any, request: pytest.FixtureRequest
) -> None:
    base_url, _ = browser_host
    fetched: list[str] = []
    page.on("request", lambda sent: fetched.append(sent.url))

    page.goto(f"{base_url}/")
    assert page.get_by_role("heading", level=1).inner_text().startswith("openwop-host")
    for name in ("Discovery", "Documentation", "Pages"):
        assert page.get_by_role("heading", name=name).is_visible()
    screenshot(page, request, "front-door")

    page.get_by_role("link", name="REST API reference").click()
    page.wait_for_url(f"{base_url}/host/openwop-host/api-docs")
    assert page.locator("section.card h2", has_text="/runs").first.is_visible()
    assert page.locator("tr.operation").count() > 10
    screenshot(page, request, "api-reference")

    page.goto(f"{base_url}/")
    page.get_by_role("link", name="Tenant console").click()
    page.wait_for_url(f"{base_url}/console/**")
    assert fetched and all(url.startswith(f"{base_url}/") for url in fetched), fetched
