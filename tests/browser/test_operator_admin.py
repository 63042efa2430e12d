"""An operator edits facets in the admin: the services' validation shows inline as they type, the
preview shows discovery and the agent card as they will be served, and after Save discovery
(`/.well-known/openwop`) really changes — MCP's preferred revision moved, and the A2A card's path
moved (interop.md §The facets). The operator holds only the `operators` group's own grants."""

from __future__ import annotations

import json

import httpx
import pytest

from apps.facets.models import FacetChange
from apps.facets.services import facet_ensure
from tests.browser.conftest import screenshot
from tests.browser.roles import admin_login, operator


def _a2a(base_url: str) -> dict:  # type: ignore[type-arg]
    return httpx.get(f"{base_url}/.well-known/openwop", timeout=10).json()["a2a"]


def _mcp(base_url: str) -> dict:  # type: ignore[type-arg]
    return httpx.get(f"{base_url}/.well-known/openwop", timeout=10).json()["mcp"]


MOVED = "/cards/agent.json"


def test_operator_moves_the_card_path_and_discovery_follows(
    browser_host: tuple[str, object],
    page,
    request: pytest.FixtureRequest,  # type: ignore[no-untyped-def]
) -> None:
    base_url, _ = browser_host
    facet_ensure(protocol="a2a")
    facet_ensure(protocol="mcp")
    assert _a2a(base_url)["preferredVersion"] == "1.0"
    admin_login(page, base_url, operator(), "/admin/facets/facet/")
    assert page.locator("#result_list .sla").first.inner_text() == "FRESH"
    page.locator("#result_list").get_by_role("link", name="A2A", exact=True).click()
    page.wait_for_url("**/admin/facets/facet/a2a/change/")

    # A card path another route already answers: refused inline, with the service's own message.
    page.locator("#id_agent_card_path").fill("/runs")
    error = page.locator('.live-errors[data-field="agent_card_path"]')
    error.wait_for()
    assert "already served by another route (runs)" in error.inner_text()
    screenshot(page, request, "inline-validation")

    # A free path: valid, and the preview shows what will be served; nothing is saved yet.
    page.locator("#id_agent_card_path").fill(MOVED)
    page.wait_for_function(
        "document.getElementById('preview-status').textContent.startsWith('Preview of what will be served')"
    )
    assert page.locator(".live-errors").count() == 0
    previewed = json.loads(page.locator("#preview-discovery").inner_text())
    card = json.loads(page.locator("#preview-card").inner_text())
    assert previewed["a2a"]["agentCardUrl"].endswith(MOVED)
    assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"
    assert _a2a(base_url)["agentCardUrl"].endswith("/.well-known/agent-card.json")
    assert httpx.get(f"{base_url}{MOVED}", timeout=10).status_code == 404
    assert not FacetChange.objects.filter(actor__startswith="admin-preview").exists()
    screenshot(page, request, "preview")

    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url("**/admin/facets/facet/")
    # The message names the facet and what the save changed (issue 53).
    saved = page.locator(".messagelist").inner_text()
    assert "Changed a2a facet: Agent card path." in saved

    page.goto(f"{base_url}/.well-known/openwop")
    served = json.loads(page.locator("body").inner_text())
    assert served["a2a"]["agentCardUrl"].endswith(MOVED)
    page.goto(f"{base_url}{MOVED}")  # the card is now served where discovery says
    assert json.loads(page.locator("body").inner_text())["name"] == card["name"]
    change = FacetChange.objects.filter(protocol="a2a").order_by("-at").first()
    assert change is not None and change.actor == "admin:olga-operator"
    assert change.before["agent_card_path"] == "/.well-known/agent-card.json"
    assert change.after["agent_card_path"] == MOVED

    # The same operator then moves MCP's preferred revision (one test for both stories: the live
    # host caches content types, which a flush between two tests would renumber under it).
    _operator_moves_mcp_preferred_revision(page, base_url, request)


def _operator_moves_mcp_preferred_revision(page, base_url: str, request: pytest.FixtureRequest) -> None:  # type: ignore[no-untyped-def]
    assert _mcp(base_url)["preferredVersion"] == "2026-07-28"
    page.goto(f"{base_url}/admin/facets/facet/")
    assert page.locator("#result_list .sla").first.inner_text() == "FRESH"
    page.locator("#result_list").get_by_role("link", name="MCP", exact=True).click()
    page.wait_for_url("**/admin/facets/facet/mcp/change/")

    # Preferred 2025-11-25 below the 2026-07-28 floor: refused inline, with the service's own message.
    # (Only revisions the MCP door serves may be offered; A2A serves 1.0 alone, so MCP is the facet
    # whose preferred version an operator can really move.)
    page.locator("#id_versions").fill('["2026-07-28", "2025-11-25"]')
    page.locator("#id_preferred_version").fill("2025-11-25")
    error = page.locator('.live-errors[data-field="minimum_version"]')
    error.wait_for()
    assert "above the preferred revision 2025-11-25" in error.inner_text()
    screenshot(page, request, "mcp-inline-validation")

    # Floor lowered: valid, and the preview shows what will be served; nothing is saved yet.
    page.locator("#id_minimum_version").fill("2025-11-25")
    page.wait_for_function(
        "document.getElementById('preview-status').textContent.startsWith('Preview of what will be served')"
    )
    assert page.locator(".live-errors").count() == 0
    previewed = json.loads(page.locator("#preview-discovery").inner_text())
    card = json.loads(page.locator("#preview-card").inner_text())
    assert previewed["mcp"]["preferredVersion"] == "2025-11-25" and previewed["mcp"]["minimumRevision"] == "2025-11-25"
    assert card["supportedInterfaces"][0]["protocolVersion"] == "1.0"  # an MCP edit leaves the A2A card alone
    assert _mcp(base_url)["preferredVersion"] == "2026-07-28"
    assert not FacetChange.objects.filter(actor__startswith="admin-preview").exists()
    screenshot(page, request, "mcp-preview")

    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url("**/admin/facets/facet/")
    # The message names the facet and what the save changed (issue 53).
    saved = page.locator(".messagelist").inner_text()
    assert "Changed mcp facet: Versions, Preferred version, Minimum version." in saved

    page.goto(f"{base_url}/.well-known/openwop")
    page.reload()  # the browser already holds this document from the first story: revalidate it
    served = json.loads(page.locator("body").inner_text())
    assert served["mcp"]["preferredVersion"] == "2025-11-25"
    assert served["mcp"]["revisions"] == ["2026-07-28", "2025-11-25"]
    change = FacetChange.objects.filter(protocol="mcp").order_by("-at").first()
    assert change is not None and change.actor == "admin:olga-operator"
    assert change.before["preferred_version"] == "2026-07-28" and change.after["preferred_version"] == "2025-11-25"
