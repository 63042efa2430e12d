"""The front door (issue 53 item 3): `/` is an HTML page linking the console, the admin, the docs,
discovery and the REST API reference; the reference lists exactly the operations of `/openapi.json`,
which omits the conformance seams while they are off. Nothing on either page is fetched from
another origin, and what the page prints from settings is escaped."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings

from tests.admin.html_pages import page_links
from tests.door_client import DoorClient

pytestmark = pytest.mark.django_db

SEAMS = "/conformance/seams/"


def _page(path: str) -> str:
    response = DoorClient().get(path)
    assert response.status_code == 200, (path, response.status_code)
    assert response["Content-Type"].startswith("text/html")
    assert "OpenWOP-Version" not in response  # an HTML page, not the REST wire
    return response.content.decode()


def _no_other_origin(html: str) -> None:
    """Every link, script, stylesheet and image is this host's own: a path or a fragment."""
    for url in re.findall(r'(?:href|src|action)="([^"]*)"', html):
        assert url.startswith(("/", "#")) and not url.startswith("//"), url


def test_the_front_door_links_what_a_newcomer_looks_for() -> None:
    html = _page("/")
    links = page_links(html)
    for wanted in ("/console/", "/admin/", "/host/openwop-host/api-docs", "/openapi.json",
                   "/.well-known/agent-card.json", "/.well-known/openwop", "/.well-known/jwks.json"):  # fmt: skip
        assert wanted in links, (wanted, links)
    assert "make docs" in html and "docs/" in html  # where the documentation site is
    _no_other_origin(html)
    client = DoorClient()
    for link in links:  # every link answers: a page, a redirect to sign in, or a document
        if link.startswith("#"):
            continue
        status = client.get(link).status_code
        assert status in (200, 302) or (link == "/.well-known/oauth-protected-resource" and status == 404), (
            link,
            status,
        )


@override_settings(OPENWOP_PUBLIC_URL="http://127.0.0.1:8123/<script>alert(1)</script>")
def test_what_the_page_prints_is_escaped() -> None:
    html = _page("/")
    assert "<script>alert(1)</script>" not in html
    assert "http://127.0.0.1:8123/&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _schema_paths() -> set[str]:
    return set(DoorClient().get("/openapi.json").json()["paths"])


def _reference_paths(html: str) -> set[str]:
    return set(re.findall(r'<h2 class="mono">([^<]+)</h2>', html))


def test_the_api_reference_lists_every_operation_of_the_schema() -> None:
    html = _page("/host/openwop-host/api-docs")
    schema = DoorClient().get("/openapi.json").json()
    assert _reference_paths(html) == set(schema["paths"]) and "/runs" in schema["paths"]
    operations = sum(1 for item in schema["paths"].values() for method in item if method != "parameters")
    assert html.count('<tr class="operation">') == operations
    for item in schema["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                assert f'<span class="mono">{operation["operationId"]}</span>' in html
    _no_other_origin(html)


def test_the_schema_and_the_reference_omit_the_seams_while_they_are_off() -> None:
    with override_settings(OPENWOP_CONFORMANCE_SEAMS=False):
        assert not any(path.startswith(SEAMS) for path in _schema_paths())
        assert SEAMS not in _page("/host/openwop-host/api-docs")
    with override_settings(OPENWOP_CONFORMANCE_SEAMS=True):
        served = {path for path in _schema_paths() if path.startswith(SEAMS)}
        assert served == {f"{SEAMS}sample/a2a/invoke", f"{SEAMS}sample/mcp/invoke"}
        assert served <= _reference_paths(_page("/host/openwop-host/api-docs"))
