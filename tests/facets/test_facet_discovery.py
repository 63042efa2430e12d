"""Discovery advertises `a2a` / `mcp` from the facet rows, only for surfaces really served, and
each record validates against its vendored facet schema (plus interop.md's newer fields)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import jsonschema
import pytest
from django.test import Client
from django.utils import timezone

from apps.facets import surfaces
from apps.facets.models import Facet
from tests.envelope import SPEC

pytestmark = pytest.mark.django_db
FACETS = SPEC / "openwop-v2/spec/v2/facets"
RECORD_KEYS = {"status", "since", "until", "witness"}


def _schema(name: str) -> dict:  # type: ignore[type-arg]
    schema = json.loads((FACETS / f"{name}.schema.json").read_text())
    if name == "a2a":  # interop.md §Per-agent cards: newer than the vendored copy
        schema["properties"]["agentCards"] = {"const": True}
    if name == "mcp":  # RFC 0204 §A.1 (host-services.md §mcp, ctx.mcp): newer than the vendored copy
        schema["properties"]["client"] = {"type": "boolean"}
    schema["additionalProperties"] = False
    return schema


def _facet_part(record: dict) -> dict:  # type: ignore[type-arg]
    return {k: v for k, v in record.items() if k not in RECORD_KEYS}


@pytest.fixture
def all_surfaces() -> Iterator[None]:
    names = [
        surfaces.A2A,
        surfaces.A2A_STREAMING,
        surfaces.A2A_PUSH,
        surfaces.A2A_DURABLE_TASKS,
        surfaces.A2A_AGENT_CARDS,
        surfaces.MCP_STREAMABLE_HTTP,
        surfaces.MCP_STDIO,
        *(surfaces.MCP_FEATURE_PREFIX + f for f in ("server-discover", "mrtr", "cacheable-lists", "extensions")),
    ]
    already = {n for n in names if surfaces.is_served(n)}
    for name in names:
        surfaces.register_surface(name)
    yield
    for name in set(names) - already:
        surfaces.unregister_surface(name)


def _doc(client: Client) -> dict:  # type: ignore[type-arg]
    return json.loads(client.get("/.well-known/openwop").content)


def test_records_validate_against_the_facet_schemas(client: Client, all_surfaces: None) -> None:
    doc = _doc(client)
    checker = jsonschema.FormatChecker()
    jsonschema.validate(_facet_part(doc["a2a"]), _schema("a2a"), format_checker=checker)
    jsonschema.validate(_facet_part(doc["mcp"]), _schema("mcp"), format_checker=checker)
    a2a, mcp = doc["a2a"], doc["mcp"]
    assert a2a["preferredVersion"] in a2a["versions"] and a2a["minimumVersion"] in a2a["versions"]
    assert mcp["preferredVersion"] in mcp["revisions"] and mcp["minimumRevision"] in mcp["revisions"]
    assert a2a["agentCardUrl"].endswith("/.well-known/agent-card.json")
    assert mcp["serverMount"] == {"transports": ["streamable-http", "stdio"]}
    assert mcp["mrtr"] == {"maxRounds": 4}
    for record in (a2a, mcp):
        assert all(not p.endswith("-legacy") for p in record.get("profiles", []))
        refreshed = dt.date.fromisoformat(record["refreshedAt"])
        assert refreshed <= timezone.now().date()
        assert (timezone.now().date() - refreshed).days <= 90
    text = json.dumps(doc)
    assert "supportedTransports" not in text and '"grpc"' not in text


def test_nothing_is_advertised_for_surfaces_not_served(client: Client) -> None:
    names = (surfaces.A2A, surfaces.MCP_STREAMABLE_HTTP, surfaces.MCP_STDIO)
    served_before = {n for n in names if surfaces.is_served(n)}
    for name in served_before:
        surfaces.unregister_surface(name)
    try:
        doc = _doc(client)
        assert "a2a" not in doc and "mcp" not in doc
    finally:
        for name in served_before:
            surfaces.register_surface(name)


def test_optional_fields_follow_served_surfaces(client: Client, all_surfaces: None) -> None:
    surfaces.unregister_surface(surfaces.A2A_AGENT_CARDS)
    surfaces.unregister_surface(surfaces.A2A_PUSH)
    surfaces.unregister_surface(surfaces.MCP_STDIO)
    try:
        doc = _doc(client)
        assert "agentCards" not in doc["a2a"]
        assert doc["a2a"]["pushNotifications"] is False
        assert doc["mcp"]["serverMount"] == {"transports": ["streamable-http"]}
    finally:
        for name in (surfaces.A2A_AGENT_CARDS, surfaces.A2A_PUSH, surfaces.MCP_STDIO):
            surfaces.register_surface(name)


def test_a_stale_date_is_advertised_as_it_is(client: Client, all_surfaces: None) -> None:
    _doc(client)  # creates and evaluates the rows
    old = timezone.now().date() - dt.timedelta(days=200)
    Facet.objects.filter(protocol="a2a").update(refreshed_at=old)
    assert _doc(client)["a2a"]["refreshedAt"] == old.isoformat()  # never faked as fresh


def test_a_never_evaluated_facet_is_not_advertised(client: Client, all_surfaces: None) -> None:
    _doc(client)
    Facet.objects.filter(protocol="mcp").update(refreshed_at=None)
    assert "mcp" not in _doc(client)
